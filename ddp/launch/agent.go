package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/flight"
	"github.com/xladdp/xladdp/ddp/internal/procset"
	"github.com/xladdp/xladdp/ddp/launch/internal/preflight"
	"github.com/xladdp/xladdp/ddp/store"
	"github.com/xladdp/xladdp/internal/freeport"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// outcome is how one attempt of the workers ended.
type outcome struct {
	ok        bool
	failure   *exit  // a worker of this node failed
	remote    string // another node failed or was lost
	cancelled bool   // ddprun was stopped
	preempted bool   // ... and every worker checkpointed (workerenv.ExitPreempted)
	// flight is the diagnosis of this node's workers' flight records
	// after a failure, and flightDir where they are.
	flight, flightDir string
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
// with: 0, the failed worker's exit status (128+N for signal N), 1 for a
// failure elsewhere or of the agent itself, or 130 when ctx ended.
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
	if c.Transport == backendMPI {
		return runMPI(ctx, c, environ, stdout, stderr, say)
	}
	if err := checkProgram(c.Program); err != nil {
		say("ddprun: %v", err)
		return 1
	}
	if err := checkFlightDir(environ); err != nil {
		say("ddprun: %v", err)
		return 1
	}
	r, err := openRendezvous(ctx, c, lookupIn(environ)(store.EnvToken), say)
	if err != nil {
		say("ddprun: %v", err)
		return 1
	}
	defer r.close()
	me := nodeID()
	for attempt := 0; ; attempt++ {
		a, err := assign(ctx, r, c, attempt, me)
		if err != nil {
			if ctx.Err() != nil {
				return 130
			}
			say("ddprun: %v", err)
			return 1
		}
		res := runAttempt(ctx, c, r, a, attempt, environ, stdout, stderr)
		why := ""
		switch {
		case res.ok:
			return 0
		case res.cancelled && res.preempted:
			say("ddprun: preempted (%v): every worker checkpointed and exited %d; run the same command again to resume",
				context.Cause(ctx), workerenv.ExitPreempted)
			return workerenv.ExitPreempted
		case res.cancelled:
			say("ddprun: stopped (%v); every worker on this node was stopped", context.Cause(ctx))
			return 130
		case res.failure != nil:
			why = "worker failed: " + res.failure.String()
		default:
			why = res.remote
		}
		if attempt < c.MaxRestarts {
			say("ddprun: %s; every worker was stopped; restarting (restart %d of %d)", why, attempt+1, c.MaxRestarts)
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
		return 1
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// assign decides attempt's ranks: alone without a rendezvous, else with
// the other nodes.
func assign(ctx context.Context, r *rendezvous, c Config, attempt int, me string) (assignment, error) {
	if r != nil {
		return r.join(ctx, attempt, me)
	}
	host := orLocal(c.MasterAddr)
	port := c.MasterPort
	if _, given := c.Sources["master_port"]; !given {
		// A free port, so jobs on one machine never collide.
		p, err := freeport.Pick("")
		if err != nil {
			return assignment{}, fmt.Errorf("the workers' store: %w", err)
		}
		port = p
	} else if isLocal(host) {
		// Worker rank 0 would fail to listen, the others to connect: say
		// who holds it before starting them.
		if f := preflight.PortFree("/proc", port, fmt.Sprintf("--master_port=%d", port),
			"pick another port, or leave --master_port unset and ddprun picks a free one"); f != nil {
			return assignment{}, errors.New(f.String())
		}
	}
	return assignment{node: 0, nnodes: 1, world: c.NProcPerNode, master: net.JoinHostPort(host, strconv.Itoa(port))}, nil
}

// runAttempt starts the node's workers and watches them (and, with a
// rendezvous, the other nodes) until all succeed or one thing fails, in
// which case every worker here is stopped.
func runAttempt(ctx context.Context, c Config, r *rendezvous, a assignment, attempt int, environ []string,
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
		attempt: attempt, env: append(append([]string(nil), environ...), workerenv.FlightDir+"="+dumps), stdout: stdout, stderr: stderr})
	if err != nil {
		e := &exit{node: a.node, rank: a.offset, code: 1, tail: err.Error()}
		if r != nil {
			r.fail(context.WithoutCancel(ctx), attempt, a.node, e.String()+": "+err.Error(), time.Now())
		}
		return outcome{failure: e}
	}
	var w *watch
	if r != nil {
		w = r.newWatch(attempt, a)
	}
	ticker := time.NewTicker(c.MonitorInterval)
	defer ticker.Stop()
	for remaining := len(set.Processes); remaining > 0; {
		select {
		case wk := <-set.Exits:
			remaining--
			if e := describe(wk, a.node); e != nil {
				seen := time.Now()
				if r != nil {
					// Tell the others first: their workers wait on ours.
					r.fail(context.WithoutCancel(ctx), attempt, a.node, "worker failed: "+e.String(), seen)
				}
				root, failures, left := rootCause(set, a.node, e, remaining)
				remaining = left
				local, readErr := set.collectFlight(dumps, true)
				root = preferBehind(root, failures, local)
				if r != nil && root != e {
					r.fail(context.WithoutCancel(ctx), attempt, a.node, "worker failed: "+root.String(), seen)
				}
				e = root
				diagnosis, behind := set.flightDiagnosis(ctx, r, a, attempt, local, readErr, dumps)
				keepDumps = diagnosis != ""
				set.stop()
				if r != nil && !slices.Contains(behind, e.rank) {
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
					if first := r.firstFailure(context.WithoutCancel(ctx), attempt, a.node, a.nnodes, since, time.Second); first != "" {
						return outcome{remote: first + " (then here: " + e.String() + ")", flight: diagnosis, flightDir: dumps}
					}
				}
				return outcome{failure: e, flight: diagnosis, flightDir: dumps}
			}
		case <-c.FlightRequests:
			if set.answerFlightRequest(dumps, stderr) {
				keepDumps = true
			}
		case <-ctx.Done():
			// The workers get SIGTERM and the time to checkpoint; a job
			// whose every worker did is preempted, not failed.
			set.Stop(procset.PreemptGrace)
			preempted := set.Preempted()
			if r != nil && !preempted {
				r.fail(context.WithoutCancel(ctx), attempt, a.node, fmt.Sprintf("node %d's agent was stopped", a.node), time.Now())
			}
			return outcome{cancelled: true, preempted: preempted}
		case <-ticker.C:
			if w == nil {
				continue
			}
			if why := w.tick(ctx); why != "" {
				// Another node failed: this node's records complete the
				// picture (the failing node's agent prints it).
				local, readErr := set.collectFlight(dumps, true)
				diagnosis, _ := set.flightDiagnosis(ctx, r, a, attempt, local, readErr, dumps)
				keepDumps = diagnosis != ""
				set.stop()
				return outcome{remote: why, flight: diagnosis, flightDir: dumps}
			}
		}
	}
	set.stop() // closes the log files
	if r != nil {
		if err := r.finish(ctx, w); err != nil {
			return outcome{remote: err.Error()}
		}
	}
	return outcome{ok: true}
}

// causeWindow is how long, after a worker fails, the agent gathers the
// other failures that may have been its cause or its consequence.
const causeWindow = 200 * time.Millisecond

// rootCause picks, among first and the failures that follow within
// causeWindow, the one that most likely started it: a worker killed by a
// signal before a worker that exited on its own (which usually saw a peer
// die), else the first seen.
func rootCause(set workerSet, node int, first *exit, remaining int) (root *exit, failures []*exit, left int) {
	failures = []*exit{first}
	window := time.After(causeWindow)
	for remaining > 0 {
		select {
		case wk := <-set.Exits:
			remaining--
			if e := describe(wk, node); e != nil {
				failures = append(failures, e)
			}
			continue
		case <-window:
		}
		break
	}
	for _, f := range failures {
		if f.signal != "" {
			return f, failures, remaining
		}
	}
	return first, failures, remaining
}

// preferBehind replaces a root cause that exited on its own by another
// failed worker the flight records show behind the others (it left the
// collectives they then failed in): which of the two exits is seen first
// is a race.
func preferBehind(root *exit, failures []*exit, dumps []flight.Dump) *exit {
	if root.signal != "" || len(dumps) == 0 {
		return root
	}
	behind := flight.Behind(dumps)
	if slices.Contains(behind, root.rank) {
		return root
	}
	for _, f := range failures {
		if slices.Contains(behind, f.rank) {
			return f
		}
	}
	return root
}
