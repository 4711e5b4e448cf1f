package main

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/examples/internal/exampletest"
)

// TestLauncherOptionAfterTheProgram: `ddprun bin/toy --nproc_per_node=2`
// gives the option to the toy, which says it is ddprun's and where it
// goes, instead of printing its whole usage.
func TestLauncherOptionAfterTheProgram(t *testing.T) {
	exampletest.CleanEnv(t)
	argv := append([]string{exampletest.Ddprun(t)}, exampletest.Self()...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), exampletest.Env("toy", "--nproc_per_node=2")...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", out)
	assert.Contains(t, string(out), "--nproc_per_node=2 is ddprun's (torchrun's) option, given after the program")
	assert.Contains(t, string(out), "(ddprun --nproc_per_node=2 PROGRAM ...)")
	assert.NotContains(t, string(out), "--checkpoint-every", "not the toy's whole usage")
}
