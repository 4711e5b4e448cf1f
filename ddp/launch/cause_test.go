package launch

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/internal/transport"
)

func TestPickRoot(t *testing.T) {
	sawClose := func(rank, peer int) *exit {
		return &exit{rank: rank, code: 4, tail: "worker: " + (&transport.PeerError{Rank: peer, Op: "AllReduce #3", Err: transport.ErrPeerClosed}).Error()}
	}
	killed := &exit{rank: 1, code: 137, signal: "SIGKILL"}
	assertion := &exit{rank: 2, code: 2, tail: "panic: assertion failed"}
	for _, tc := range []struct {
		name     string
		failures []*exit
		want     *exit
	}{
		{"alone", []*exit{assertion}, assertion},
		{"a signal before the exit that saw it", []*exit{sawClose(0, 1), killed}, killed},
		{"the blamed rank before the first seen", []*exit{sawClose(0, 2), sawClose(3, 2), assertion}, assertion},
		{"a rank blaming only itself is no cause", []*exit{sawClose(0, 1), sawClose(2, 2)}, nil},
		{"nobody blamed: the first", []*exit{assertion, {rank: 0, code: 1}}, assertion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			if want == nil {
				want = tc.failures[0]
			}
			assert.Same(t, want, pickRoot(tc.failures))
		})
	}
}

// TestLateReapedDeathIsTheCause: rank 1's connections close 1.5 s before
// its exit is reaped (a loaded node reaps late), so ranks 0 and 2 fail
// first, naming it; ddprun still names rank 1's SIGKILL as the failure
// (the CI run this fixes blamed the rank that saw it).
func TestLateReapedDeathIsTheCause(t *testing.T) {
	mark := "slow-death" + strconv.FormatInt(time.Now().UnixNano(), 36)
	_, before := leftovers(t, mark)
	res := runAgent(t.Context(), t, mark, "fault-slow-death", []string{"--nproc_per_node=3", "--monitor_interval=0.05"},
		"XLADDP_TEST_TIMEOUT="+faultTimeout.String(), "XLADDP_TEST_DIR="+t.TempDir(), "XLADDP_SHM_MIB=16")
	require.NotZero(t, res.code, res.stderr)
	assert.Contains(t, res.stderr, "[rank0]:worker: ddp: AllReduce #3: rank 1: connection closed", "the healthy ranks saw rank 1 go")
	assert.Contains(t, res.stderr, "ddprun: worker failed: node 0, rank 1 (local rank 1): signal SIGKILL")
	assert.NotContains(t, res.stderr, "worker failed: node 0, rank 0")
	assert.NotContains(t, res.stderr, "worker failed: node 0, rank 2")
	assertNothingLeft(t, mark, before)
}
