package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const childEnv = "XLADDP_DDPTOY_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := train(context.Background(), 20); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestTrainsOnTwoRanks runs the program as 2 ranks over loopback; both
// finish and rank 0 prints a finite loss.
func TestTrainsOnTwoRanks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	var outs [2]strings.Builder
	cmds := make([]*exec.Cmd, 2)
	for r := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", fmt.Sprintf("RANK=%d", r), "WORLD_SIZE=2",
			"MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", port), "LOCAL_RANK=", "LOCAL_WORLD_SIZE=")
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		require.NoError(t, cmd.Start())
		cmds[r] = cmd
	}
	for r, cmd := range cmds {
		assert.NoError(t, cmd.Wait(), "rank %d: %s", r, outs[r].String())
	}
	assert.Regexp(t, `final loss \d+\.\d{4}`, outs[0].String())
	assert.NotContains(t, outs[1].String(), "final loss")
}
