package dist_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xladdp/xladdp/ddp/dist"
)

// TestPeerLost: what counts as a peer's loss (a commit of the last
// completed step follows) and what does not (a bug, a cancelled job).
func TestPeerLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a closed connection", &dist.PeerError{Rank: 2, Op: "AllReduce #3", Err: dist.ErrPeerClosed}, true},
		{"a timeout", &dist.PeerError{Rank: 2, Op: "AllReduce #3", Err: dist.ErrTimeout}, true},
		{"another rank's report", &dist.PeerError{Rank: 2, Op: "AllGather #9", Err: errors.New("failed, as rank 0 reports (…)")}, true},
		{"wrapped", fmt.Errorf("checkpoint: agreeing on preemption: %w", &dist.PeerError{Rank: 1, Err: dist.ErrPeerClosed}), true},
		{"a broken group", fmt.Errorf("ddp: %w", dist.ErrGroupClosed), true},
		{"a mismatch", &dist.PeerError{Rank: 1, Err: fmt.Errorf("ranks disagree: %w", dist.ErrMismatch)}, false},
		{"a cancelled job", context.Canceled, false},
		{"an error of the program's", errors.New("the loss is NaN"), false},
		{"none", nil, false},
	} {
		assert.Equal(t, tc.want, dist.PeerLost(tc.err), tc.name)
	}
}
