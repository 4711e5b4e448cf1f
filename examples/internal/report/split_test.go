package report

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStepSplit: laps charge their phase, Move re-charges no more than
// the phase holds (never below zero), phases print in first-seen order
// with their total, and time between runs (Stop … Start) is not charged.
func TestStepSplit(t *testing.T) {
	s := NewStepSplit()
	assert.Equal(t, "no steps timed", s.String())
	s.Stop() // before any Start: nothing to add
	s.Lap("before start")
	for range 2 {
		s.Start()
		for range 3 {
			time.Sleep(2 * time.Millisecond)
			s.Lap("data")
			time.Sleep(4 * time.Millisecond)
			s.Lap("trace")
			s.Move("trace", "execute", 3*time.Millisecond)
			s.Move("trace", "upload", time.Hour) // more than trace holds
			s.Move("trace", "download", -time.Second)
			s.EndStep()
		}
		s.Stop()
		time.Sleep(200 * time.Millisecond) // a test pass: not charged
		s.Lap("between runs")
	}
	require.Equal(t, 6, s.Steps())
	// A sleep never ends early and may end late on a loaded machine: the
	// bounds are the sleeps below, a loose margin above.
	assert.True(t, s.PerStep("data") >= 2*time.Millisecond && s.PerStep("data") < 20*time.Millisecond, "data: %v", s.PerStep("data"))
	assert.InDelta(t, 3, s.PerStep("execute").Seconds()*1000, 1e-9, "moved exactly")
	assert.True(t, s.PerStep("upload") >= time.Millisecond && s.PerStep("upload") < 20*time.Millisecond,
		"the rest of trace, no more: %v", s.PerStep("upload"))
	assert.Zero(t, s.PerStep("trace"))
	assert.Zero(t, s.PerStep("download"), "a negative move moves nothing")
	assert.NotContains(t, s.String(), "download", "nor shows the phase")
	assert.Zero(t, s.PerStep("never seen"))
	assert.NotContains(t, s.String(), "runs", "a lap outside a run charges nothing")
	assert.NotContains(t, s.String(), "before start")
	m := regexp.MustCompile(`^per step over 6 steps: data \S+ ms, trace 0 ms, execute 3 ms, upload \S+ ms = (\S+) ms; Go heap \d+ allocations \(\d+ KiB\) per step$`).
		FindStringSubmatch(s.String())
	require.NotNil(t, m, s.String())
	total, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	// Sleeps overshoot, the more on a loaded machine; the 200 ms between
	// runs would add 67 a step.
	assert.True(t, total >= 6 && total < 40, "the total is the laps' time, the time between runs left out: %s", s)
}
