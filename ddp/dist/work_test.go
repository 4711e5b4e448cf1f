package dist

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFinishedWorkWithEndedContext: a Work that is already done returns
// its result even when ctx has ended, every time (select would otherwise
// pick either branch).
func TestFinishedWorkWithEndedContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cause := errors.New("bad buffer")
	for range 1000 {
		assert.NoError(t, finished("Barrier", nil).Wait(ctx))
		assert.ErrorIs(t, finished("AllReduce", cause).Wait(ctx), cause)
	}
}
