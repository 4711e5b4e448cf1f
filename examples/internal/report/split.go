package report

import (
	"fmt"
	"runtime"
	"strings"
	"time"
)

// StepSplit adds up where a training loop's steps spend their wall time,
// phase by phase (waiting for data, tracing, executing, the host
// all-reduce, reading the loss), and how much the Go heap allocates per
// step: what to speed up, measured where the user runs.
//
// Start the clock before the loop, Lap at each phase's end, EndStep at
// each step's end. Phases are reported in the order first seen.
type StepSplit struct {
	phases []string
	sums   map[string]time.Duration
	last   time.Time
	steps  int
	// The heap's counters at Start; Stop adds the run's allocations.
	allocs, allocBytes uint64
	started            bool
	memStart           runtime.MemStats
}

// NewStepSplit returns an empty split.
func NewStepSplit() *StepSplit { return &StepSplit{sums: map[string]time.Duration{}} }

// Start starts the clock (and the heap count) for a run of steps, such as
// an epoch: what happens between runs (a test pass) is not charged.
func (s *StepSplit) Start() {
	runtime.ReadMemStats(&s.memStart)
	s.started = true
	s.last = time.Now()
}

// Lap charges the time since the previous Lap (or Start) to phase; outside
// a run (before Start, after Stop) it charges nothing.
func (s *StepSplit) Lap(phase string) {
	if !s.started {
		return
	}
	now := time.Now()
	s.add(phase, now.Sub(s.last))
	s.last = now
}

// Move re-charges d of from's time to phase to: a finer measurement taken
// inside a lap (the host all-reduce inside the backward pass). It moves
// no more than from holds, and nothing (a phase not yet seen stays
// unseen) when that is not positive.
func (s *StepSplit) Move(from, to string, d time.Duration) {
	d = min(d, s.sums[from])
	if d <= 0 {
		return
	}
	s.add(from, -d)
	s.add(to, d)
}

// EndStep counts one step.
func (s *StepSplit) EndStep() { s.steps++ }

// Stop ends a run of steps started by Start and adds its heap allocations.
func (s *StepSplit) Stop() {
	if !s.started {
		return
	}
	var now runtime.MemStats
	runtime.ReadMemStats(&now)
	s.allocs += now.Mallocs - s.memStart.Mallocs
	s.allocBytes += now.TotalAlloc - s.memStart.TotalAlloc
	s.started = false
}

func (s *StepSplit) add(phase string, d time.Duration) {
	if _, seen := s.sums[phase]; !seen {
		s.phases = append(s.phases, phase)
	}
	s.sums[phase] += d
}

// Steps returns the steps counted.
func (s *StepSplit) Steps() int { return s.steps }

// PerStep returns phase's mean time per step (0 before any step).
func (s *StepSplit) PerStep(phase string) time.Duration {
	if s.steps == 0 {
		return 0
	}
	return s.sums[phase] / time.Duration(s.steps)
}

// String reports the mean per step of each phase and their total, then
// the Go heap's allocations per step:
//
//	per step over 938 steps: data 0.02 ms, trace 1.9 ms, execute 40.1 ms, … = 48.3 ms; Go heap 2113 allocations (190 KiB) per step
func (s *StepSplit) String() string {
	if s.steps == 0 {
		return "no steps timed"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "per step over %d steps: ", s.steps)
	var total time.Duration
	for i, p := range s.phases {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", p, ms(s.PerStep(p)))
		total += s.PerStep(p)
	}
	fmt.Fprintf(&b, " = %s; Go heap %d allocations (%.0f KiB) per step", ms(total),
		s.allocs/uint64(s.steps), float64(s.allocBytes)/float64(s.steps)/1024)
	return b.String()
}

// ms prints a duration in milliseconds with 3 significant digits.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.3g ms", float64(d)/float64(time.Millisecond))
}
