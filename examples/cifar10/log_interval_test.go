package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestLogIntervalOffATerminal: rank 0 reads the loss, and the progress
// prints a line off a terminal, on the epoch's first step, every
// min(5, --log-interval) and the last; a resumed epoch starts at its own
// first step. (It read on every step after the first: each read moved
// "the first".)
func TestLogIntervalOffATerminal(t *testing.T) {
	reads := func(first, logInterval, total int) []int {
		var out []int
		for step := first; step <= total; step++ {
			if readsLoss(step, first, min(5, logInterval), total) {
				out = append(out, step)
			}
		}
		return out
	}
	assert.Equal(t, []int{1, 2, 3, 4}, reads(1, 1, 4))
	assert.Equal(t, []int{1, 3, 6, 7}, reads(1, 3, 7))
	assert.Equal(t, []int{1, 5, 10, 12}, reads(1, 10, 12), "the default: every 5")
	assert.Equal(t, []int{4, 5, 10, 11}, reads(4, 10, 11), "resumed at step 4")
}
