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

	"github.com/xladdp/xladdp/ddp/internal/procset"
	"github.com/xladdp/xladdp/ddp/launch/internal/preflight"
	"github.com/xladdp/xladdp/ddp/store"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// outcomeKind is how one attempt of the workers ended. The agent's loop
// decides on it in one switch (policy.decide), as torch's agent on its
// workers' WorkerState.
type outcomeKind int

const (
	// succeeded: every worker exited 0, and every other node's.
	succeeded outcomeKind = iota
	// workerFailed: a worker of this node failed (outcome.failure).
	workerFailed
	// remoteFailed: something else failed: another node's worker, a lost
	// node, mpirun (outcome.why; outcome.code to exit with, 0 for 1).
	remoteFailed
	// storeLost: the rendezvous store stopped answering (outcome.err).
	storeLost
	// membershipChange: the round ended to admit outcome.admit nodes
	// waiting to join an elastic job.
	membershipChange
	// preempted: every worker checkpointed and exited 75, on a SIGTERM
	// that reached them, or on ddprun's own stop (outcome.signalled).
	preempted
	// stopped: ddprun was stopped before every worker checkpointed
	// (outcome.err: what failed after).
	stopped
	// notStarted: the attempt could not start (outcome.err).
	notStarted
	// peerLost: this node's workers lost a peer in a collective, committed
	// the last step they completed and exited 75 (outcome.why: the first
	// one's word).
	peerLost
)

// outcome is how one attempt of the workers ended, with what its kind
// needs.
type outcome struct {
	kind      outcomeKind
	failure   *exit  // workerFailed: the worker, named
	why       string // remoteFailed, peerLost
	code      int    // remoteFailed: the status to exit with (0: 1)
	err       error  // storeLost, stopped, notStarted
	admit     int    // membershipChange: how many nodes wait
	signalled bool   // preempted: ddprun itself was stopped
	// storeErr is a store call that failed along the way, any kind: the
	// other nodes may not have heard what this node saw.
	storeErr error
	// live, after a peer's loss (peerLost) or once they held a step for
	// a joining node (membershipChange), are this node's workers that
	// wait alive for their place in the next round; nil when they exited.
	live *liveWorkers
	// flight is the diagnosis of this node's workers' flight records
	// after a failure or a stop, and flightDir where they are.
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
// 75 when every worker checkpointed on a preemption (ctx ended, or a
// SIGTERM reached the workers), or 130 when ctx ended otherwise.
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
	p := &policy{maxRestarts: c.MaxRestarts, say: say}
	for attempt := 0; ; attempt++ {
		if code, again := p.decide(ctx, starter.attempt(ctx, attempt)); !again {
			return code
		}
	}
}

// policy is the agent's failure policy: after each attempt, restart or
// the status to exit with.
type policy struct {
	maxRestarts int
	restarts    int // after failures: --max_restarts counts these
	say         func(string, ...any)
}

// decide returns the status ddprun exits with after res, or again to
// start the next attempt.
func (p *policy) decide(ctx context.Context, res outcome) (code int, again bool) {
	if res.storeErr != nil {
		p.say("ddprun: the rendezvous store failed along the way (the other nodes may take this node for lost): %v", res.storeErr)
	}
	if ctx.Err() != nil && (res.kind == membershipChange || res.kind == notStarted) {
		// ddprun was stopped meanwhile: no next round.
		res = outcome{kind: stopped, err: res.err}
	}
	switch res.kind {
	case succeeded:
		return 0, false
	case membershipChange:
		if res.live != nil {
			how := "the new workers healing from a live peer's memory"
			if !strings.Contains(res.why, "in this process's memory") {
				how = "the new workers reading that step's sharded checkpoint"
			}
			p.say("ddprun: %d node(s) waiting to join: every worker holds the step they all completed (%s); "+
				"going on with them in the same processes, %s (a membership change: not counted against --max_restarts)", res.admit, res.why, how)
			return 0, true
		}
		p.say("ddprun: %d node(s) waiting to join: every worker was stopped (a checkpointing worker saved its state); "+
			"restarting with them (a membership change: not counted against --max_restarts)", res.admit)
		return 0, true
	case preempted:
		why := "SIGTERM reached the workers"
		if res.signalled {
			why = context.Cause(ctx).Error()
		}
		p.say("ddprun: preempted (%s): every worker checkpointed and exited %d; run the same command again to resume",
			why, workerenv.ExitPreempted)
		return workerenv.ExitPreempted, false
	case stopped:
		p.say("ddprun: stopped (%v); every worker on this node was stopped", context.Cause(ctx))
		if res.err != nil {
			p.say("ddprun: %v", res.err)
		}
		if res.flight != "" {
			p.say("ddprun: flight record when stopped (%s): %s", res.flightDir, res.flight)
		}
		return 130, false
	case notStarted:
		p.say("ddprun: %v", res.err)
		return 1, false
	case workerFailed, remoteFailed, storeLost:
		return p.failed(res)
	case peerLost:
		return p.lostPeer(res)
	}
	p.say("ddprun: internal error: an attempt ended in no known way (kind %d)", res.kind)
	return 1, false
}

// failed restarts after a failure while --max_restarts allows, else
// names it and returns its status: the failed worker's, or 1.
func (p *policy) failed(res outcome) (code int, again bool) {
	why := res.why
	switch res.kind {
	case workerFailed:
		why = "worker failed: " + res.failure.String()
	case storeLost:
		why = res.err.Error()
	}
	if p.restarts < p.maxRestarts {
		p.restarts++
		p.say("ddprun: %s; every worker was stopped; restarting (restart %d of %d)", why, p.restarts, p.maxRestarts)
		return 0, true
	}
	p.say("ddprun: %s; every worker was stopped", why)
	if res.flight != "" {
		p.say("ddprun: flight record (%s): %s", res.flightDir, res.flight)
	}
	if res.kind == workerFailed {
		if res.failure.tail != "" {
			p.say("ddprun: last output of rank %d:\n%s", res.failure.rank, indent(res.failure.tail))
		}
		return res.failure.code, false
	}
	return cmp.Or(res.code, 1), false
}

// lostPeer restarts from the step the workers committed after losing a
// peer, while --max_restarts allows (a lost node is a failure, counted);
// else ddprun exits 75: the same command resumes from it.
func (p *policy) lostPeer(res outcome) (code int, again bool) {
	if p.restarts < p.maxRestarts {
		p.restarts++
		how := "restarting from it"
		if res.live != nil {
			how = "going on from it in the same processes, regrouped without the lost node"
		}
		p.say("ddprun: %s; %s (restart %d of %d)", res.why, how, p.restarts, p.maxRestarts)
		return 0, true
	}
	p.say("ddprun: %s; no restart left (--max_restarts=%d): run the same command again to resume from it", res.why, p.maxRestarts)
	return workerenv.ExitPreempted, false
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
	dir, err := regroupDir(c, environ)
	if err != nil {
		return nil, err
	}
	m, err := openMeeting(ctx, c, lookupIn(environ)(store.EnvToken), say)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if dir != "" {
		environ = append(slices.Clone(environ), workerenv.RegroupDir+"="+dir)
	}
	return &localWorkers{cfg: c, meeting: m, environ: environ, regroupDir: dir, stdout: stdout, stderr: stderr}, nil
}

// localWorkers are this node's workers started by the agent itself, with
// torchrun's environment, after meeting the other nodes.
type localWorkers struct {
	cfg     Config
	meeting meeting
	// ahead is how many rounds the job's rendezvous is ahead of this
	// node's attempts: a node admitted at the job's restart
	// (joinAtNextRestart) meets in the job's rounds.
	ahead   int
	environ []string
	// regroupDir is where the workers get their next place after a
	// peer's loss ("" under --restart_on_peer_loss); live are the
	// workers waiting there, alive, for the next attempt.
	regroupDir     string
	live           *liveWorkers
	stdout, stderr io.Writer
}

func (l *localWorkers) close() {
	l.stopLive()
	l.meeting.close()
	if l.regroupDir != "" {
		os.RemoveAll(l.regroupDir)
	}
}

// notMet ends an attempt whose round did not meet: live workers waiting
// for a place are stopped; when ddprun itself was stopped and they kept
// their commit (exit 75), the job is preempted, resumable from it.
func (l *localWorkers) notMet(ctx context.Context, err error) outcome {
	live := l.live
	l.stopLive()
	if live != nil && ctx.Err() != nil && live.set.Preempted() {
		return outcome{kind: preempted, signalled: true}
	}
	return outcome{kind: notStarted, err: err}
}

// stopLive stops workers that wait for a place no round gives them: they
// exit 75 with their commit.
func (l *localWorkers) stopLive() {
	if l.live != nil {
		l.live.set.Stop(procset.PreemptGrace)
		l.live = nil
	}
}

func (l *localWorkers) attempt(ctx context.Context, attempt int) outcome {
	a, err := l.meeting.join(ctx, attempt+l.ahead)
	if err != nil {
		return l.notMet(ctx, err)
	}
	// A node that joined a running job at its restart meets in the
	// job's rounds from then on.
	l.ahead = a.round - attempt
	res := runAttempt(ctx, l.cfg, l.meeting, a, attempt, l.environ, l.live, l.stdout, l.stderr)
	l.live = res.live
	return res
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
