package termination

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestHoldCountsHolders: termination is held while any holder has not
// released, a double release counts once, and concurrent holders agree.
func TestHoldCountsHolders(t *testing.T) {
	assert.False(t, Held())
	a := Hold()
	b := Hold()
	a()
	a()
	assert.True(t, Held(), "b still holds it; a's second release does nothing")
	b()
	assert.False(t, Held())

	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release := Hold()
			assert.True(t, Held())
			release()
		}()
	}
	wg.Wait()
	assert.False(t, Held())
}
