package launch

// One attempt of this node's workers, as the agent runs it: start them,
// then watch them, the other nodes and ddprun's own context until the
// attempt ends one way (outcome).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/procset"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// attemptRun is one attempt's state, shared by its steps.
type attemptRun struct {
	ctx    context.Context
	cfg    Config
	m      meeting
	a      assignment
	stderr io.Writer
	dumps  string // the flight records' directory
	// keepDumps: a diagnosis or a word on a stall names dumps.
	keepDumps bool
	set       workerSet
	w         nodeWatch
	remaining int   // workers whose exit is not read yet
	reaped    []int // the ranks whose exit was read
	// admitErrSince is when the admission checks started failing (zero
	// while they answer).
	admitErrSince time.Time
	// regroupDir is the workers' ("" under --restart_on_peer_loss), and
	// holdAsked when they were asked to hold a step for a joining node
	// (join.go).
	regroupDir string
	holdAsked  time.Time
}

// runAttempt starts the node's workers and watches them (and, with a
// rendezvous, the other nodes) until all succeed or one thing fails, in
// which case every worker here is stopped.
func runAttempt(ctx context.Context, c Config, m meeting, a assignment, attempt int, environ []string, live *liveWorkers,
	stdout, stderr io.Writer) outcome {
	dumps, ownDumps, err := flightDir(environ, attempt)
	if err != nil {
		return outcome{kind: notStarted, err: fmt.Errorf("node %d: the flight record directory: %w", a.node, err)}
	}
	run := &attemptRun{ctx: ctx, cfg: c, m: m, a: a, stderr: stderr, dumps: dumps, regroupDir: lookupIn(environ)(workerenv.RegroupDir)}
	defer func() {
		if ownDumps && !run.keepDumps {
			os.RemoveAll(dumps)
		}
	}()
	if res, started := run.start(environ, live, stdout); !started {
		return res
	}
	return run.supervise()
}

// start starts the workers, or gives live ones their places; when one
// cannot start, the others are told of this node's failure.
func (r *attemptRun) start(environ []string, live *liveWorkers, stdout io.Writer) (outcome, bool) {
	a := r.a
	var (
		set workerSet
		err error
	)
	if live != nil {
		set, err = r.adopt(live, environ)
	} else {
		set, err = startWorkers(workerSpec{cfg: r.cfg, node: a.node, offset: a.offset, world: a.world, master: a.master,
			attempt: a.round, env: append(slices.Clone(environ), workerenv.FlightDir+"="+r.dumps), stdout: stdout, stderr: r.stderr})
	}
	if err != nil {
		e := &exit{node: a.node, rank: a.offset, code: 1, tail: err.Error()}
		res := outcome{kind: workerFailed, failure: e}
		res.storeErr = r.m.fail(context.WithoutCancel(r.ctx), a.round, a.node, e.String()+": "+err.Error(), time.Now())
		return res, false
	}
	r.set, r.w, r.remaining = set, r.m.watch(a.round, a), len(set.Processes)
	return outcome{}, true
}

// supervise waits for the attempt's end: every worker's exit, one's
// failure, another node's, an admission, or ddprun's stop. Meanwhile it
// answers flight requests and says when the collectives stall.
func (r *attemptRun) supervise() outcome {
	ticker := time.NewTicker(r.cfg.MonitorInterval)
	defer ticker.Stop()
	stall := newStallWatch(r.cfg.StallWarn)
	stallTicker := time.NewTicker(stall.every())
	defer stallTicker.Stop()
	for r.remaining > 0 {
		select {
		case wk := <-r.set.Exits:
			if res, ended := r.exited(wk); ended {
				return res
			}
		case <-stallTicker.C:
			if word := stall.check(r.set, r.dumps); word != "" {
				r.keepDumps = true
				consoleMu.Lock()
				fmt.Fprintln(r.stderr, word)
				consoleMu.Unlock()
			}
		case <-r.cfg.FlightRequests:
			if r.set.answerFlightRequest(r.dumps, r.stderr) {
				r.keepDumps = true
			}
		case <-r.ctx.Done():
			return r.stopped()
		case <-ticker.C:
			if res, ended := r.tick(); ended {
				return res
			}
		}
	}
	return r.finished()
}

// exited reads one worker's exit; a failure ends the attempt. A worker
// that checkpointed on its own SIGTERM (sent to every process of the
// job, not to ddprun) is no failure.
func (r *attemptRun) exited(wk *procset.Process) (outcome, bool) {
	r.remaining--
	r.reaped = append(r.reaped, wk.Rank)
	e := describe(wk, r.a.node)
	if e == nil || e.code == workerenv.ExitPreempted {
		return outcome{}, false
	}
	n, err := r.w.decided(r.ctx)
	if n > 0 {
		// Another node's workers were stopped to admit a node, and ours
		// failed for it.
		r.set.Stop(procset.PreemptGrace)
		return outcome{kind: membershipChange, admit: n}, true
	}
	res := r.failed(e)
	res.storeErr = errors.Join(err, res.storeErr)
	return res, true
}

// failed ends the attempt on this node's worker failure e: it tells the
// other nodes, gathers the failures that follow to find the one that
// started them, diagnoses the flight records, stops the workers and
// names the job's first failure.
func (r *attemptRun) failed(e *exit) outcome {
	a, bg := r.a, context.WithoutCancel(r.ctx)
	seen := time.Now()
	r.sayAlive() // this node lives on, beating no more in the round
	// Tell the others first: their workers wait on ours.
	errs := []error{r.m.fail(bg, a.round, a.node, "worker failed: "+e.String(), seen)}
	root, failures, left := rootCause(r.set, a.node, e, r.remaining, r.reaped)
	r.remaining = left
	local, readErr := r.set.collectFlight(r.dumps)
	root = preferBehind(root, failures, local)
	if root != e {
		errs = append(errs, r.m.fail(bg, a.round, a.node, "worker failed: "+root.String(), seen))
	}
	diagnosis, behind := r.set.flightDiagnosis(r.ctx, r.m, a, local, readErr, r.dumps, true)
	r.keepDumps = diagnosis != ""
	r.set.settleAfterLoss(r.dumps, false)
	res := outcome{kind: workerFailed, failure: root, flight: diagnosis, flightDir: r.dumps}
	// A node lost meanwhile is recorded, so that the next round does not
	// wait its last call for it.
	if _, err := r.markLost(bg); err != nil {
		errs = append(errs, err)
	}
	first, err := r.firstElsewhere(root, seen, behind)
	if first != "" {
		res.kind, res.why = remoteFailed, first+" (then here: "+root.String()+")"
	}
	res.storeErr = errors.Join(append(errs, err)...)
	return res
}

// elsewhereWait is how long a node whose worker failed waits for another
// node's earlier failure (a SIGKILL there closes this node's connections
// first): on a loaded host the other agent takes more than a second to
// record it, and the job would name the wrong worker.
const elsewhereWait = 3 * time.Second

// firstElsewhere names another node's failure when it, not root, is
// likely the cause: root's node may have failed because another node's
// did, and posts its record late (elsewhereWait). When the records show a rank behind and it is not ours,
// another node's failure is the cause even if posted after ours.
func (r *attemptRun) firstElsewhere(root *exit, seen time.Time, behind []int) (string, error) {
	// A worker killed here by a signal is this node's own failure, though
	// another node, faster to notice its peer's death, posted first.
	if r.a.nnodes == 1 || slices.Contains(behind, root.rank) || root.signal != "" {
		return "", nil
	}
	since := seen
	if len(behind) > 0 {
		since = time.Now().Add(time.Hour)
	}
	bg := context.WithoutCancel(r.ctx)
	rz, watches := r.m.(*rendezvous)
	var before map[int]string
	if watches {
		var err error
		if before, err = rz.heartbeats(bg, r.a.round, r.a.nnodes, r.a.node); err != nil {
			return "", err
		}
	}
	start := time.Now()
	why, err := r.m.firstFailure(bg, r.a.round, r.a.node, r.a.nnodes, since, elsewhereWait)
	if why != "" || err != nil || !watches {
		return why, err
	}
	return r.lostDuring(bg, rz, before, start)
}

// lostDuring names a node whose agent's heartbeat did not move while this
// node waited for another's failure (from start: kill -9 of its agent,
// its host gone): its workers died with it, and this node's failed for
// that. Its agent posts nothing, and the watch would call it lost only
// after heartbeatTimeout, when this node had already blamed its own
// worker.
func (r *attemptRun) lostDuring(ctx context.Context, rz *rendezvous, before map[int]string, start time.Time) (string, error) {
	if rest := 3*r.cfg.MonitorInterval - time.Since(start); rest > 0 {
		time.Sleep(rest) // every live agent beats in the window
	}
	after, err := rz.heartbeats(ctx, r.a.round, r.a.nnodes, r.a.node)
	if err != nil {
		return "", err
	}
	for n := range r.a.nnodes {
		if n != r.a.node && !alive(after[n]) && before[n] == after[n] {
			if _, err := rz.update(ctx, func(s rdzvState) rdzvState { return s.lose(r.a.round, r.a.agents[n]) }); err != nil {
				return "", err
			}
			return fmt.Sprintf("node %d was lost: its agent, %s, beat no heartbeat in the %s after this node's worker failed "+
				"at %s (its host died or ddprun was killed there, its workers with it; this node's failed for that)",
				n, r.a.agents[n], time.Since(start).Round(time.Second), start.Format("15:04:05")), nil
		}
	}
	return "", nil
}

// stopped ends the attempt on ddprun's stop. The records first (a
// stopped worker is left stopped: it stands where it stopped), then the
// workers get SIGTERM and the time to checkpoint; a job whose every
// worker did is preempted, not failed, and needs no diagnosis.
func (r *attemptRun) stopped() outcome {
	a, bg := r.a, context.WithoutCancel(r.ctx)
	if r.set.Succeeded() {
		// Every worker had finished before the signal came (their exits
		// not read yet): the job is done, nothing to resume.
		return r.finishAfterStop(bg, "after this node's workers finished", outcome{kind: succeeded})
	}
	local, readErr := r.set.collectFlight(r.dumps)
	r.set.Stop(procset.PreemptGrace)
	if r.set.Preempted() {
		// The other nodes' workers checkpointed with ours and their
		// agents, the store's host first, wait for this node's word: a
		// notice that reached this node only (a Spot instance's) must
		// not read to them as a lost node.
		return r.finishAfterStop(bg, "after this node's workers checkpointed", outcome{kind: preempted, signalled: true})
	}
	res := outcome{kind: stopped, flightDir: r.dumps}
	res.storeErr = r.m.fail(bg, a.round, a.node, fmt.Sprintf("node %d's agent was stopped", a.node), time.Now())
	res.flight = r.set.diagnose(local, readErr, r.dumps, r.set.ranks())
	r.keepDumps = res.flight != ""
	return res
}

// finishAfterStop says this node's workers are done, which the store's
// host waits for, and returns done; a failure meanwhile leaves ddprun
// stopped, saying what failed.
func (r *attemptRun) finishAfterStop(ctx context.Context, after string, done outcome) outcome {
	why, err := r.w.finish(ctx)
	if why != "" {
		err = errors.New(why)
	}
	if err != nil {
		return outcome{kind: stopped, err: fmt.Errorf("%s: %w", after, err)}
	}
	return done
}

// tick is a monitor tick: another node's failure or loss, or a store
// gone, ends the attempt (this node's records complete the picture; the
// failing node's agent prints it); so does an admission.
func (r *attemptRun) tick() (outcome, bool) {
	if note := r.set.regrouping(r.dumps); note != "" {
		if r.set.heldForJoin(r.dumps) {
			return r.regroupForJoin(note), true
		}
		return r.lostPeer(note, true), true
	}
	why, err := r.w.tick(r.ctx)
	if why != "" || err != nil {
		r.sayAlive()
		local, readErr := r.set.collectFlight(r.dumps)
		diagnosis, _ := r.set.flightDiagnosis(r.ctx, r.m, r.a, local, readErr, r.dumps, false)
		r.keepDumps = diagnosis != ""
		live := r.set.settleAfterLoss(r.dumps, err == nil)
		res := outcome{kind: remoteFailed, why: why, flight: diagnosis, flightDir: r.dumps}
		switch note := r.set.peerLoss(r.dumps); {
		case err != nil:
			res.kind, res.err = storeLost, err
		case live:
			res.kind, res.why, res.live = peerLost, why+"; "+note, &liveWorkers{set: r.set, round: r.a.round}
		case note != "" && r.set.Preempted():
			res.kind, res.why = peerLost, why+"; "+note
		}
		return res, true
	}
	n, err := r.admitting()
	if err != nil {
		r.set.stop()
		return outcome{kind: storeLost, err: err}, true
	}
	if n > 0 {
		if r.askToHold() {
			return outcome{}, false
		}
		// The time to checkpoint, as for a preemption.
		r.set.Stop(procset.PreemptGrace)
		return outcome{kind: membershipChange, admit: n}, true
	}
	return outcome{}, false
}

// admitting is how many nodes the round ends to admit. A failing check
// is asked again at the next tick, for up to heartbeatTimeout: the
// store's error then ends the attempt.
func (r *attemptRun) admitting() (int, error) {
	n, err := r.w.admitting(r.ctx)
	switch {
	case err == nil:
		r.admitErrSince = time.Time{}
	case r.admitErrSince.IsZero():
		r.admitErrSince = time.Now()
	case time.Since(r.admitErrSince) > heartbeatTimeout:
		return 0, fmt.Errorf("for %v: %w", heartbeatTimeout, err)
	}
	return n, nil
}

// finished ends the attempt once every worker exited, succeeded or
// checkpointed: the job's outcome waits for the other nodes' word.
func (r *attemptRun) finished() outcome {
	r.set.stop() // closes the log files
	var storeErr error
	if r.set.Preempted() {
		if why := r.set.peerLoss(r.dumps); why != "" {
			return r.lostPeer(why, false)
		}
		// Checkpointed for an admission another node's agent decided?
		n, err := r.w.decided(r.ctx)
		if n > 0 {
			return outcome{kind: membershipChange, admit: n}
		}
		storeErr = err
	}
	res := outcome{kind: succeeded, storeErr: storeErr}
	why, err := r.w.finish(r.ctx)
	switch {
	case err != nil && r.ctx.Err() != nil:
		res.kind, res.err = stopped, err
	case err != nil:
		res.kind, res.err = storeLost, err
	case why != "":
		res.kind, res.why = remoteFailed, why
	case r.set.Preempted():
		res.kind = preempted
	}
	return res
}
