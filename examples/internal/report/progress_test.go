package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

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

// TestBarOnlyWhereItShows: the bar is drawn on a terminal, but not on a
// rank's pty under mpirun (relayed line by line) nor off a terminal.
func TestBarOnlyWhereItShows(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	assert.True(t, barFits(true, env(nil)))
	assert.False(t, barFits(true, env(map[string]string{"OMPI_COMM_WORLD_SIZE": "2"})))
	assert.False(t, barFits(false, env(nil)))
}

// TestProgressAfterAResume: an epoch resumed after 360 of its 937 steps
// counts its rate and ETA from the steps run here: 40 steps of 64 samples
// in 40 s is 64 samples/s and 537 steps to go, 8m57s (it said 9950
// samples/s and "eta 3s", counting the 360 steps run before the resume).
func TestProgressAfterAResume(t *testing.T) {
	var out bytes.Buffer
	p := NewProgress(&out, "epoch 1/1", 937, 100)
	p.ResumedAt(360)
	p.start = time.Now().Add(-40 * time.Second)
	p.Step(400, 0.5, 40*64)
	assert.Contains(t, out.String(), "epoch 1/1 step 400/937 loss 0.5000 64 samples/s eta 8m57s")
}
