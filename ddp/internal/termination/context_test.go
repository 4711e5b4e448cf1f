package termination

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestContextFollowsThePolicy: SIGINT cancels, and SIGTERM, unless
// termination is held when it arrives (a checkpointer then owns it and the
// context stays live for its save); a second SIGINT while held cancels;
// stop cancels and ends the watcher.
func TestContextFollowsThePolicy(t *testing.T) {
	tests := []struct {
		name       string
		sig        syscall.Signal
		held       bool
		times      int
		wantCancel error
	}{
		{"SIGINT", syscall.SIGINT, false, 1, ErrInterrupted},
		{"SIGINT while held", syscall.SIGINT, true, 1, nil},
		{"SIGINT twice while held", syscall.SIGINT, true, 2, ErrInterrupted},
		{"SIGTERM", syscall.SIGTERM, false, 1, ErrTerminated},
		{"SIGTERM while held", syscall.SIGTERM, true, 1, nil},
		{"SIGTERM twice while held", syscall.SIGTERM, true, 2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, stop := Context(context.Background())
			defer stop()
			if tt.held {
				defer Hold()()
			}
			// A handler of the program's own sees every signal too.
			own := make(chan os.Signal, 1)
			signal.Notify(own, tt.sig)
			defer signal.Stop(own)
			for range tt.times {
				require.NoError(t, syscall.Kill(os.Getpid(), tt.sig))
				select {
				case <-own:
				case <-time.After(5 * time.Second):
					t.Fatalf("the program's own handler did not see %s", tt.sig)
				}
			}
			select {
			case <-ctx.Done():
				assert.ErrorIs(t, context.Cause(ctx), tt.wantCancel)
				assert.NotNil(t, tt.wantCancel, "cancelled while a holder owned the notice")
			case <-time.After(300 * time.Millisecond):
				assert.Nil(t, tt.wantCancel, "not cancelled by %s", tt.sig)
			}
			stop()
			stop()
			assert.Error(t, ctx.Err(), "stop cancels")
		})
	}
}
