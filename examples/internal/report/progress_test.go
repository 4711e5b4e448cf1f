package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestProgressLinesWithoutATerminal: off a terminal a line follows the
// first step (a slow model shows it runs at once), every Every steps and
// the last; a nil Progress (ranks other than 0) prints nothing.
func TestProgressLinesWithoutATerminal(t *testing.T) {
	var out bytes.Buffer
	p := NewProgress(&out, "epoch 1/1", 7, 3)
	for step := 1; step <= 7; step++ {
		p.Step(step, 0.5, 10)
	}
	p.Done()
	var steps []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		steps = append(steps, strings.Fields(line)[3])
	}
	assert.Equal(t, []string{"1/7", "3/7", "6/7", "7/7"}, steps, out.String())

	var none *Progress
	none.Step(1, 0.5, 10)
	none.Note("x")
	none.Done()
}
