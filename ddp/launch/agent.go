package launch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/procset"
	"github.com/xladdp/xladdp/ddp/launch/internal/preflight"
	"github.com/xladdp/xladdp/ddp/store"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// outcome is how one attempt of the workers ended.
type outcome struct {
	ok        bool
	failure   *exit  // a worker of this node failed
	remote    string // else what failed: another node, a lost node, mpirun
	code      int    // the status for remote (0: 1)
	fatal     error  // the attempt could not start: no restart
	cancelled bool   // ddprun was stopped
	preempted bool   // ... and every worker checkpointed (workerenv.ExitPreempted)
	admit     int    // the round ended to admit this many waiting nodes
	// flight is the diagnosis of this node's workers' flight records
	// after a failure, and flightDir where they are.
	flight, flightDir string
}

// workerStarter runs this node's workers, one attempt at a time: started
// by the agent after a rendezvous (localWorkers) or by mpirun
// (mpirunWorkers, --backend=mpi). The agent's loop (Run) applies the
// same restart and preemption policy to both.
type workerStarter interface {
	attempt(ctx context.Context, attempt int) outcome
	close()
}

// checkProgram refuses a training program that cannot be started, saying
// why before any rendezvous: ddprun starts executables, where torchrun
// starts Python scripts.
func checkProgram(program string) error {
	if _, err := exec.LookPath(program); err != nil {
		hint := "give the path of an executable, e.g. a Go training binary (go build -o bin/train ./train)"
		if strings.HasSuffix(program, ".py") {
			hint = fmt.Sprintf("ddprun starts executables, not Python scripts: give the interpreter, "+
				"ddprun [options] python3 %s [args]", program)
		}
		return fmt.Errorf("cannot start %s: %w; %s", program, err, hint)
	}
	return nil
}

// Run runs this node's part of the job: the rendezvous, the workers, the
// failure policy and the restarts. It returns the status ddprun exits
// with: 0, the failed worker's exit status (128+N for signal N; mpirun's
// under --backend=mpi), 1 for a failure elsewhere or of the agent itself,
// 75 when ctx ended and every worker checkpointed, or 130 when ctx ended.
func Run(ctx context.Context, c Config, environ []string, stdout, stderr io.Writer) int {
	say := func(format string, a ...any) {
		consoleMu.Lock()
		defer consoleMu.Unlock()
		fmt.Fprintf(stderr, format+"\n", a...)
	}
	for _, note := range c.Notes {
		say("ddprun: note: %s", note)
	}
	if c.Check {
		if findings := localFindings(ctx, c, environ, preflight.ThisHost()); len(findings) > 0 {
			for _, f := range findings {
				say("ddprun: --check: %s", f)
			}
			say("ddprun: --check found %d problem(s); nothing was started", len(findings))
			return 1
		}
	}
	starter, err := newStarter(ctx, c, environ, stdout, stderr, say)
	if err != nil {
		say("ddprun: %v", err)
		return 1
	}
	defer starter.close()
	restarts := 0 // after failures: --max_restarts counts these
	for attempt := 0; ; attempt++ {
		res := starter.attempt(ctx, attempt)
		why := res.remote
		switch {
		case res.ok:
			return 0
		case res.admit > 0 && ctx.Err() == nil:
			say("ddprun: %d node(s) waiting to join: every worker was stopped (a checkpointing worker saved its state); "+
				"restarting with them (a membership change: not counted against --max_restarts)", res.admit)
			continue
		case res.preempted:
			why := "SIGTERM reached the workers"
			if res.cancelled {
				why = context.Cause(ctx).Error()
			}
			say("ddprun: preempted (%s): every worker checkpointed and exited %d; run the same command again to resume",
				why, workerenv.ExitPreempted)
			return workerenv.ExitPreempted
		case res.cancelled || res.fatal != nil && ctx.Err() != nil:
			say("ddprun: stopped (%v); every worker on this node was stopped", context.Cause(ctx))
			if res.fatal != nil {
				say("ddprun: %v", res.fatal)
			}
			if res.flight != "" {
				say("ddprun: flight record when stopped (%s): %s", res.flightDir, res.flight)
			}
			return 130
		case res.fatal != nil:
			say("ddprun: %v", res.fatal)
			return 1
		case res.failure != nil:
			why = "worker failed: " + res.failure.String()
		}
		if restarts < c.MaxRestarts {
			restarts++
			say("ddprun: %s; every worker was stopped; restarting (restart %d of %d)", why, restarts, c.MaxRestarts)
			continue
		}
		say("ddprun: %s; every worker was stopped", why)
		if res.flight != "" {
			say("ddprun: flight record (%s): %s", res.flightDir, res.flight)
		}
		if res.failure != nil {
			if res.failure.tail != "" {
				say("ddprun: last output of rank %d:\n%s", res.failure.rank, indent(res.failure.tail))
			}
			return res.failure.code
		}
		return cmp.Or(res.code, 1)
	}
}

// newStarter checks what the job needs before any rendezvous and returns
// the starter of its workers.
func newStarter(ctx context.Context, c Config, environ []string, stdout, stderr io.Writer, say func(string, ...any)) (workerStarter, error) {
	checks := []error{checkProgram(c.Program), checkFlightDir(environ)}
	if c.Transport == backendMPI {
		if err := errors.Join(append(checks, checkMPI(c))...); err != nil {
			return nil, err
		}
		return &mpirunWorkers{cfg: c, environ: environ, stdout: stdout, stderr: stderr, say: say}, nil
	}
	if err := errors.Join(checks...); err != nil {
		return nil, err
	}
	m, err := openMeeting(ctx, c, lookupIn(environ)(store.EnvToken), say)
	if err != nil {
		return nil, err
	}
	return &localWorkers{cfg: c, meeting: m, environ: environ, stdout: stdout, stderr: stderr}, nil
}

// localWorkers are this node's workers started by the agent itself, with
// torchrun's environment, after meeting the other nodes.
type localWorkers struct {
	cfg     Config
	meeting meeting
	// ahead is how many rounds the job's rendezvous is ahead of this
	// node's attempts (joinAtNextRestart).
	ahead          int
	environ        []string
	stdout, stderr io.Writer
}

func (l *localWorkers) close() { l.meeting.close() }

func (l *localWorkers) attempt(ctx context.Context, attempt int) outcome {
	a, err := l.meeting.join(ctx, attempt+l.ahead)
	if err != nil {
		return outcome{fatal: err}
	}
	// A node that joined a running job at its restart meets in the
	// job's rounds from then on.
	l.ahead = a.round - attempt
	return runAttempt(ctx, l.cfg, l.meeting, a, attempt, l.environ, l.stdout, l.stderr)
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// runAttempt starts the node's workers and watches them (and, with a
// rendezvous, the other nodes) until all succeed or one thing fails, in
// which case every worker here is stopped.
func runAttempt(ctx context.Context, c Config, m meeting, a assignment, attempt int, environ []string,
	stdout, stderr io.Writer) outcome {
	dumps, ownDumps, err := flightDir(environ, attempt)
	if err != nil {
		return outcome{failure: &exit{node: a.node, rank: a.offset, code: 1, tail: "the flight record directory: " + err.Error()}}
	}
	keepDumps := false
	defer func() {
		if ownDumps && !keepDumps {
			os.RemoveAll(dumps)
		}
	}()
	set, err := startWorkers(workerSpec{cfg: c, node: a.node, offset: a.offset, world: a.world, master: a.master,
		attempt: a.round, env: append(append([]string(nil), environ...), workerenv.FlightDir+"="+dumps), stdout: stdout, stderr: stderr})
	if err != nil {
		e := &exit{node: a.node, rank: a.offset, code: 1, tail: err.Error()}
		m.fail(context.WithoutCancel(ctx), a.round, a.node, e.String()+": "+err.Error(), time.Now())
		return outcome{failure: e}
	}
	w := m.watch(a.round, a)
	ticker := time.NewTicker(c.MonitorInterval)
	defer ticker.Stop()
	stall := newStallWatch(c.StallWarn)
	stallTicker := time.NewTicker(stall.every())
	defer stallTicker.Stop()
	var reaped []int // the ranks whose exit was received
	for remaining := len(set.Processes); remaining > 0; {
		select {
		case wk := <-set.Exits:
			remaining--
			reaped = append(reaped, wk.Rank)
			// A worker that checkpointed on its own SIGTERM (sent to every
			// process of the job, not to ddprun) is no failure.
			if e := describe(wk, a.node); e != nil && e.code != workerenv.ExitPreempted {
				if n, ok := w.decided(ctx); ok {
					// Another node's workers were stopped to admit a
					// node, and ours failed for it.
					set.Stop(procset.PreemptGrace)
					return outcome{admit: n}
				}
				seen := time.Now()
				// Tell the others first: their workers wait on ours.
				m.fail(context.WithoutCancel(ctx), a.round, a.node, "worker failed: "+e.String(), seen)
				root, failures, left := rootCause(set, a.node, e, remaining, reaped)
				remaining = left
				local, readErr := set.collectFlight(dumps)
				root = preferBehind(root, failures, local)
				if root != e {
					m.fail(context.WithoutCancel(ctx), a.round, a.node, "worker failed: "+root.String(), seen)
				}
				e = root
				diagnosis, behind := set.flightDiagnosis(ctx, m, a, a.round, local, readErr, dumps, true)
				keepDumps = diagnosis != ""
				set.stop()
				if a.nnodes > 1 && !slices.Contains(behind, e.rank) {
					// Our worker may have failed because another node's
					// did: name the first failure. A loaded node may take
					// most of a second to post its own (300 ms was short).
					// When the records show a rank behind and it is not
					// ours, another node's failure is the cause even if
					// posted after ours.
					since := seen
					if len(behind) > 0 {
						since = time.Now().Add(time.Hour)
					}
					if first := m.firstFailure(context.WithoutCancel(ctx), a.round, a.node, a.nnodes, since, time.Second); first != "" {
						return outcome{remote: first + " (then here: " + e.String() + ")", flight: diagnosis, flightDir: dumps}
					}
				}
				return outcome{failure: e, flight: diagnosis, flightDir: dumps}
			}
		case <-stallTicker.C:
			if word := stall.check(set, dumps); word != "" {
				keepDumps = true
				consoleMu.Lock()
				fmt.Fprintln(stderr, word)
				consoleMu.Unlock()
			}
		case <-c.FlightRequests:
			if set.answerFlightRequest(dumps, stderr) {
				keepDumps = true
			}
		case <-ctx.Done():
			if set.Succeeded() {
				// Every worker had finished before the signal came (their
				// exits not read yet): the job is done, nothing to resume.
				if err := w.finish(context.WithoutCancel(ctx)); err != nil {
					return outcome{cancelled: true, fatal: fmt.Errorf("after this node's workers finished: %w", err)}
				}
				return outcome{ok: true}
			}
			// The records first (a stopped worker is left stopped: it
			// stands where it stopped), then the workers get SIGTERM and
			// the time to checkpoint; a job whose every worker did is
			// preempted, not failed, and needs no diagnosis.
			local, readErr := set.collectFlight(dumps)
			set.Stop(procset.PreemptGrace)
			if set.Preempted() {
				// The other nodes' workers checkpointed with ours and their
				// agents, the store's host first, wait for this node's
				// word: a notice that reached this node only (a Spot
				// instance's) must not read to them as a lost node.
				if err := w.finish(context.WithoutCancel(ctx)); err != nil {
					return outcome{cancelled: true, fatal: fmt.Errorf("after this node's workers checkpointed: %w", err)}
				}
				return outcome{cancelled: true, preempted: true}
			}

			m.fail(context.WithoutCancel(ctx), a.round, a.node, fmt.Sprintf("node %d's agent was stopped", a.node), time.Now())
			diagnosis := set.diagnose(local, readErr, dumps, set.ranks())
			keepDumps = diagnosis != ""
			return outcome{cancelled: true, flight: diagnosis, flightDir: dumps}
		case <-ticker.C:
			if why := w.tick(ctx); why != "" {
				// Another node failed: this node's records complete the
				// picture (the failing node's agent prints it).
				local, readErr := set.collectFlight(dumps)
				diagnosis, _ := set.flightDiagnosis(ctx, m, a, a.round, local, readErr, dumps, false)
				keepDumps = diagnosis != ""
				set.stop()
				return outcome{remote: why, flight: diagnosis, flightDir: dumps}
			}
			if n, ok := w.admitting(ctx); ok {
				// The time to checkpoint, as for a preemption.
				set.Stop(procset.PreemptGrace)
				return outcome{admit: n}
			}
		}
	}
	set.stop() // closes the log files
	if set.Preempted() {
		// Checkpointed for an admission another node's agent decided?
		if n, ok := w.decided(ctx); ok {
			return outcome{admit: n}
		}
	}
	if err := w.finish(ctx); err != nil {
		return outcome{remote: err.Error()}
	}
	if set.Preempted() {
		return outcome{preempted: true}
	}
	return outcome{ok: true}
}
