//go:build mpi

package mpiengine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/transport"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// Name is the transport's registered name.
const Name = "mpi"

func init() { transport.Register(Name, open) }

// engine is the communication library the transport maps calls onto
// (binding.go: Open MPI).
type engine interface {
	// run performs collective c and returns when it is done.
	run(c transport.Call) error
	// start begins point-to-point operation c without waiting for it.
	start(c transport.Call) (engineRequest, error)
	// callName is the library call an operation maps to, for messages.
	callName(kind transport.Kind, async bool) string
	// abort ends the whole job (every process) with exit code 1.
	abort()
	// leave tells every peer this rank leaves the group (Destroy) after
	// the collective numbered lastSeq.
	leave(lastSeq uint64)
	// departed returns a peer that left, and its last collective, once
	// per peer (ok false when none is new).
	departed() (rank int, lastSeq uint64, ok bool)
	// close releases the engine once no operation is in flight.
	close() error
}

// engineRequest is an operation an engine started.
type engineRequest interface {
	// test reports whether it finished, and how.
	test() (bool, error)
}

// engineWorld is where an engine places this process.
type engineWorld struct {
	rank, size, localRank, localSize int
}

// AbortGrace is how long an operation may still take once its Wait was
// cancelled, or the group failed or was destroyed under it, before the
// job is aborted: an engine's operations cannot be cancelled, and the
// caller's buffer must be let go of.
const AbortGrace = 5 * time.Second

// engineTick is how often the watchdog looks at the operations in flight
// when no point-to-point operation is pending.
const engineTick = 50 * time.Millisecond

// group is one rank's MPI transport: its engine and what the watchdog
// watches.
//
// Collectives run as the engine's blocking calls, one at a time, in issue
// order: on the caller's goroutine when nothing is queued, else on the
// group's executor (the Async variants). MPI's nonblocking collectives
// are not used for them because MPI never matches a nonblocking
// collective with a blocking one: a rank calling AllReduceAsync while
// another calls AllReduce would hang, where torch's backends (its MPI
// one runs blocking calls on a worker thread too) and the TCP transport
// let each rank choose. Point-to-point operations, which MPI does match
// across both forms, start at once as nonblocking calls, so a large Send
// waiting for its Recv holds up nothing else; the watchdog drives them.
type group struct {
	rank, size int
	timeout    time.Duration
	debug      bool
	// fail and broken are the process group's (transport.Config).
	fail   func(error)
	broken func() error
	// dump writes the flight record before the job is aborted.
	dump   func(reason string)
	engine *engineState
}

type engineState struct {
	eng engine
	mu  sync.Mutex
	// running is the collective now in its blocking call, if any (its
	// fields reused: no allocation per operation).
	running   inFlight
	isRunning bool
	// p2p are the started point-to-point operations.
	p2p []*inFlight
	// deadlineCap, once set (by a failure or Destroy), bounds the
	// deadline of every operation, those still queued included.
	deadlineCap time.Time
	// departed is the first peer known to have left the group (Destroy),
	// after its collective departedAfter; -1 while none has.
	departed      int
	departedAfter uint64
	wake          chan struct{}
	stop          chan struct{}
	stopped       chan struct{}
}

// inFlight is an operation the watchdog watches.
type inFlight struct {
	name     string
	seq      uint64
	kind     transport.Kind
	async    bool
	deadline time.Time
	ctx      context.Context // the caller's, for an inline collective
	req      engineRequest
	peer     int // a point-to-point operation's other rank
	// done closes when a point-to-point operation finished, with err.
	done chan struct{}
	err  error
}

func (g *group) label(op *inFlight) string {
	return fmt.Sprintf("%s #%d (%s)", op.name, op.seq, g.engine.eng.callName(op.kind, op.async))
}

// open initializes MPI (once per process) and makes a group on a
// communicator of its own.
func open(_ context.Context, o transport.Config) (transport.Opened, error) {
	eng, world, err := newMPIEngine(o)
	if err != nil {
		return transport.Opened{}, err
	}
	g := &group{rank: world.rank, size: world.size, timeout: o.Timeout, debug: o.Debug, fail: o.Fail, broken: o.Broken, dump: o.Dump,
		engine: &engineState{eng: eng, wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}),
			departed: -1}}
	go g.watchEngine()
	return transport.Opened{Transport: g,
		World:    transport.World{Rank: world.rank, Size: world.size, LocalRank: world.localRank, LocalSize: world.localSize},
		Features: transport.Features{StartAtIssue: true, DrainOnDestroy: true}}, nil
}

// checkEngineWorld compares the world an engine reports with what the
// options and the environment say, which a launcher other than the
// engine's own would have set.
func checkEngineWorld(o transport.Config, w engineWorld, launcher string) error {
	env, err := workerenv.Parse(os.Getenv)
	if err != nil {
		return fmt.Errorf("ddp: backend %s: %w", o.Name, err)
	}
	for _, f := range []struct {
		name           string
		given, env, is int
	}{{workerenv.Rank, o.Rank, env.Rank, w.rank}, {workerenv.WorldSize, o.WorldSize, env.WorldSize, w.size}} {
		v := f.given
		if v == -1 {
			if f.env == workerenv.Unset {
				continue
			}
			v = f.env
		}
		if v != f.is {
			return fmt.Errorf("ddp: backend %s: %s=%d, but %s made this process rank %d of %d: the %s backend takes its "+
				"ranks from %s (start the job with %s), or unset %s", o.Name, f.name, v, launcher, w.rank, w.size,
				o.Name, launcher, launcher, f.name)
		}
	}
	return nil
}

// debugCheck: in debug mode every rank gathers every rank's description
// of the collective c it is about to run, under the watchdog as c (a rank
// that never joins must not hang the check).
func (g *group) debugCheck(c transport.Call) error {
	if !g.debug || g.size == 1 {
		return nil
	}
	mine := transport.Fingerprint(c.Seq, c.Describe())
	all := make([]byte, len(mine)*g.size)
	check := transport.Call{Kind: transport.AllGather, In: transport.ByteBuffer(transport.Int64, mine),
		Out: transport.ByteBuffer(transport.Int64, all), Seq: c.Seq, Deadline: c.Deadline, Ctx: c.Ctx}
	if err := g.runWatched(c, check); err != nil {
		return err
	}
	parts := make([][]byte, g.size)
	for r := range parts {
		parts[r] = all[r*len(mine) : (r+1)*len(mine)]
	}
	return transport.CompareFingerprints(c.Seq, parts, mine)
}

// Run runs collective c, with the debug check, as the engine's blocking
// call under the watchdog (with the caller's ctx when it runs inline).
func (g *group) Run(c transport.Call) error {
	if err := g.debugCheck(c); err != nil {
		return err
	}
	return g.runWatched(c, c)
}

// runWatched runs c as the engine's blocking call under the watchdog,
// which names it as the collective op (c itself, or the check before
// op: a rank that never joins op never joins its check). A zero deadline is set by the watchdog when it first sees the
// operation, within engineTick: reading the clock costs a small
// all-reduce more than anything else the group does.
func (g *group) runWatched(op, c transport.Call) error {
	s := g.engine
	deadline := c.Deadline
	s.mu.Lock()
	if s.departed >= 0 && c.Seq > s.departedAfter {
		// It could never finish: fail it before MPI sees it.
		err := s.departure()
		s.mu.Unlock()
		return err
	}
	if !s.deadlineCap.IsZero() && (deadline.IsZero() || deadline.After(s.deadlineCap)) {
		deadline = s.deadlineCap
	}
	s.running = inFlight{name: op.Kind.String(), seq: op.Seq, kind: op.Kind, deadline: deadline, ctx: c.Ctx}
	s.isRunning = true
	s.mu.Unlock()
	err := s.eng.run(c)
	s.mu.Lock()
	s.isRunning = false
	s.running.ctx = nil
	s.mu.Unlock()
	return err
}

// Inline lets every blocking collective run on the caller's goroutine
// when nothing is queued (no allocation, no hand-off).
func (g *group) Inline(transport.Call) bool { return true }

// Start starts a Send or Recv as the engine's nonblocking call; the
// watchdog completes it, and wait returns its outcome.
func (g *group) Start(c transport.Call) (func() error, error) {
	s := g.engine
	s.mu.Lock()
	gone := s.departed == c.Root
	s.mu.Unlock()
	if gone {
		return nil, &transport.PeerError{Rank: c.Root, Err: errors.New("left the group (Destroy)")}
	}
	req, err := s.eng.start(c)
	if err != nil {
		return nil, err
	}
	op := &inFlight{name: c.Kind.String() + " (point-to-point)", seq: c.Seq, kind: c.Kind, async: true,
		deadline: time.Now().Add(g.timeout), req: req, peer: c.Root, done: make(chan struct{})}
	s.mu.Lock()
	s.p2p = append(s.p2p, op)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return func() error {
		<-op.done
		return op.err
	}, nil
}

// Abort: operations in flight cannot be cancelled, so they get a grace
// period, then the job is aborted.
func (g *group) Abort(error) { g.engine.expedite(time.Now().Add(AbortGrace)) }

// Interrupt (Destroy): the operations issued before still run (the other
// ranks are in them too), all within AbortGrace or the job is
// aborted.
func (g *group) Interrupt() { g.engine.expedite(time.Now().Add(AbortGrace)) }

// Close stops the watchdog once the point-to-point operations are done,
// tells the peers this rank left after collective lastSeq, and releases
// the engine (the last group finalizes MPI).
func (g *group) Close(lastSeq uint64) error {
	s := g.engine
	for {
		s.mu.Lock()
		n := len(s.p2p)
		s.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(s.stop)
	<-s.stopped
	s.eng.leave(lastSeq)
	return s.eng.close()
}
