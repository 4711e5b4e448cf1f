package preflight

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMasterAddrWaitsForNodeZero: a node checking MASTER_ADDR while node
// 0 is still starting (every node's doctor started at once) finds it once
// it listens, within dialWait; one that never listens is said as such.
func TestMasterAddrWaitsForNodeZero(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	job := Job{MasterAddr: "127.0.0.1", MasterPort: port}
	notLocal := func(string) bool { return false }

	late := make(chan net.Listener, 1)
	time.AfterFunc(500*time.Millisecond, func() {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			late <- l
		} else {
			late <- nil
		}
	})
	findings := MasterAddr(context.Background(), job, notLocal)
	if l := <-late; l != nil {
		defer l.Close()
	} else {
		t.Skip("the port was taken meanwhile")
	}
	assert.Empty(t, findings, "node 0 listened 0.5 s late")

	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	job.MasterPort = free.Addr().(*net.TCPAddr).Port
	require.NoError(t, free.Close())
	start := time.Now()
	findings = MasterAddr(context.Background(), job, notLocal)
	require.Len(t, findings, 1)
	assert.Contains(t, findings[0].Problem, "nothing listens at 127.0.0.1:")
	assert.Less(t, time.Since(start), dialWait+time.Second)
}
