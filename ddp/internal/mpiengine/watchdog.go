//go:build mpi

package mpiengine

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/transport"
)

// watchEngine is the group's watchdog, from InitProcessGroup to Destroy:
// it drives the point-to-point operations to completion (testing them is
// what makes an MPI library progress) and aborts the job when any
// operation outlives its deadline, as NCCL's watchdog does, since none
// can be cancelled.
func (g *group) watchEngine() {
	s := g.engine
	defer close(s.stopped)
	timer := time.NewTimer(engineTick)
	defer timer.Stop()
	idle := 0
	for {
		// Deadlines are read under s.mu: failures and departures move
		// them from other goroutines.
		now := time.Now()
		s.mu.Lock()
		ops := slices.Clone(s.p2p)
		var running, late *inFlight
		if s.isRunning {
			if s.running.deadline.IsZero() {
				s.running.deadline = now.Add(g.timeout)
			}
			r := s.running
			running = &r
		}
		for _, op := range ops {
			if late == nil && now.After(op.deadline) {
				l := *op
				late = &l
			}
		}
		s.mu.Unlock()
		g.noticeDepartures()
		g.enforceDeadlines(now, running, late)
		progressed := false
		for _, op := range ops {
			if done, err := op.req.test(); done {
				g.complete(op, err)
				progressed = true
			}
		}
		if len(ops) > 0 {
			// Spin while messages are in flight (their latency is what
			// the caller waits for), then back off to short sleeps.
			if progressed {
				idle = 0
			} else if idle++; idle > 1000 {
				time.Sleep(time.Duration(min(idle-1000, 100)) * 10 * time.Microsecond)
			} else {
				runtime.Gosched()
			}
			continue
		}
		idle = 0
		timer.Reset(engineTick)
		select {
		case <-s.wake:
		case <-timer.C:
		case <-s.stop:
			return
		}
	}
}

// complete finishes a point-to-point operation's Work.
func (g *group) complete(op *inFlight, err error) {
	s := g.engine
	s.mu.Lock()
	s.p2p = slices.DeleteFunc(s.p2p, func(p *inFlight) bool { return p == op })
	s.mu.Unlock()
	op.err = err
	close(op.done)
}

// noticeDepartures acts on peers that left the group (their Destroy), as
// closed connections do on TCP. A collective numbered past a peer's last
// can never finish: one already running aborts the job at once naming
// that rank, later ones fail before they start (runEngineCollective);
// collectives up to its last still run, since this rank may not have
// reached them yet. Point-to-point operations with the peer get
// AbortGrace (a message it sent before leaving may still be
// arriving); new ones fail.
func (g *group) noticeDepartures() {
	s := g.engine
	for {
		r, last, ok := s.eng.departed()
		if !ok {
			return
		}
		// Recorded and checked against the collective running now under
		// one lock: one that starts after sees the departure itself.
		s.mu.Lock()
		if s.departed < 0 || last < s.departedAfter {
			s.departed, s.departedAfter = r, last
		}
		var doomed *inFlight
		if s.isRunning && s.running.seq > last {
			running := s.running
			doomed = &running
		}
		by := time.Now().Add(AbortGrace)
		for _, op := range s.p2p {
			if op.peer == r && op.deadline.After(by) {
				op.deadline = by
			}
		}
		s.mu.Unlock()
		if doomed != nil {
			// The rank that left may be on its way out with its last
			// words (a panic prints after the deferred Destroy): let them
			// reach mpirun before the abort ends every process.
			time.Sleep(departureGrace)
			g.abortJob(doomed, fmt.Sprintf("rank %d left the group (Destroy) after collective #%d, so it never joins this one", r, last))
		}
	}
}

// departureGrace is how long a rank waits, once a peer that left makes
// its running collective impossible, before it aborts the job.
const departureGrace = 500 * time.Millisecond

// departure is the error of an operation a departed peer never joins
// (s.mu held).
func (s *engineState) departure() error {
	return &transport.PeerError{Rank: s.departed, Err: fmt.Errorf("left the group (Destroy) after collective #%d", s.departedAfter)}
}

// enforceDeadlines aborts the job for the running collective past its
// deadline, or for late, a point-to-point operation past its own (both
// copies taken under s.mu); an inline collective whose caller's ctx ended
// breaks the group, which gives it AbortGrace more.
func (g *group) enforceDeadlines(now time.Time, running, late *inFlight) {
	if running != nil && running.ctx != nil && running.ctx.Err() != nil {
		g.fail(fmt.Errorf("ddp: rank %d stopped waiting for %s #%d: %w", g.rank, running.name, running.seq, context.Cause(running.ctx)))
		return
	}
	if running != nil && now.After(running.deadline) {
		g.abortJob(running, "")
	}
	if late != nil {
		g.abortJob(late, "")
	}
}

// expedite brings every deadline, in flight or to come, forward to at
// most by.
func (s *engineState) expedite(by time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deadlineCap.IsZero() || s.deadlineCap.After(by) {
		s.deadlineCap = by
	}
	for _, op := range s.p2p {
		if op.deadline.After(by) {
			op.deadline = by
		}
	}
	if s.isRunning {
		s.running.ctx = nil
		if s.running.deadline.IsZero() || s.running.deadline.After(by) {
			s.running.deadline = by
		}
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// abortJob ends the whole job for op, saying why on stderr first: cause,
// else the group's failure or op's timeout.
func (g *group) abortJob(op *inFlight, cause string) {
	why := g.broken()
	hint := "is a rank stalled, or did the ranks call different collectives? XLADDP_DISTRIBUTED_DEBUG=1 checks"
	if g.debug {
		hint = "is a rank stalled?"
	}
	msg := fmt.Sprintf("ddp: rank %d: %s did not finish within the %v timeout; it cannot be cancelled, so the job "+
		"is aborted (%s)", g.rank, g.label(op), g.timeout, hint)
	switch {
	case cause != "":
		msg = fmt.Sprintf("ddp: rank %d: %s cannot finish: %s; the job is aborted", g.rank, g.label(op), cause)
	case why != nil:
		msg = fmt.Sprintf("ddp: rank %d: %s was still running %v after the group failed (%v); it cannot be "+
			"cancelled, so the job is aborted", g.rank, g.label(op), AbortGrace, why)
	}
	if g.dump != nil {
		g.dump(msg)
	}
	fmt.Fprintln(os.Stderr, msg)
	g.engine.eng.abort()
	os.Exit(1) // abort does not return; should it, the job still ends
}
