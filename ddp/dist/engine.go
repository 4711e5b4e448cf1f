package dist

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/xladdp/xladdp/internal/workerenv"
)

// Process-group backends (Options.Backend, $XLADDP_BACKEND).
const (
	// BackendTCP is the default: TCP between hosts, shared memory on one,
	// nothing to install.
	BackendTCP = "tcp"
	// BackendMPI runs every operation through MPI (Open MPI), in programs
	// built with -tags mpi and started by mpirun.
	BackendMPI = "mpi"
	// EnvBackend chooses the backend for NewOptions.
	EnvBackend = workerenv.Backend
)

// engine is a communication library that runs the group's operations
// whole (MPI), in place of its TCP and shared-memory transports. The
// group validates each operation, orders, names and times it; the engine
// only maps it onto the library.
type engine interface {
	// run performs collective c and returns when it is done. Calls take
	// an engineCall by value: a pointer given to an interface method
	// escapes, costing an allocation per operation.
	run(c engineCall) error
	// start begins point-to-point operation c without waiting for it.
	start(c engineCall) (engineRequest, error)
	// callName is the library call an operation maps to, for messages.
	callName(kind opKind, async bool) string
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

// opKind is the operation an engineCall asks for.
type opKind int

const (
	opAllReduce opKind = iota + 1
	opBroadcast
	opAllGather
	opReduceScatter
	opAllToAll
	opGather
	opScatter
	opBarrier
	opSend
	opRecv
)

// engineCall is one validated operation. In-place operations (AllReduce,
// Broadcast, Send, Recv) use buf; the others read in and write out. The
// engine reduces Avg as Sum: the group divides.
type engineCall struct {
	kind                opKind
	buf, in, out        Buffer
	op                  ReduceOp
	root                int // the root, or the peer of a Send or Recv
	tag                 uint32
	inSplits, outSplits []int
}

// newEngines builds the engine of a backend, registered by files built
// with that backend's tag (engine_mpi.go: -tags mpi).
var newEngines = map[string]func(o Options) (engine, engineWorld, error){}

// engineWorld is where an engine places this process.
type engineWorld struct {
	rank, size, localRank, localSize int
}

// engineAbortGrace is how long an operation may still take once its Wait
// was cancelled, or the group failed or was destroyed under it, before
// the job is aborted: an engine's operations cannot be cancelled, and
// the caller's buffer must be let go of.
const engineAbortGrace = 5 * time.Second

// engineTick is how often the watchdog looks at the operations in flight
// when no point-to-point operation is pending.
const engineTick = 50 * time.Millisecond

// engineState is a group's engine and what the watchdog watches.
//
// Collectives run as the engine's blocking calls, one at a time, in issue
// order: on the caller's goroutine when nothing is queued, else on the
// group's executor (the Async variants). MPI's nonblocking collectives
// are not used for them because MPI never matches a nonblocking
// collective with a blocking one: a rank calling AllReduceAsync while
// another calls AllReduce would hang, where torch's backends (its MPI
// one runs blocking calls on a worker thread too) and our TCP transport
// let each rank choose. Point-to-point operations, which MPI does match
// across both forms, start at once as nonblocking calls, so a large Send
// waiting for its Recv holds up nothing else; the watchdog drives them.
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
	kind     opKind
	async    bool
	deadline time.Time
	ctx      context.Context // the caller's, for an inline collective
	req      engineRequest
	work     *Work
	peer     int // a point-to-point operation's other rank
}

func (g *ProcessGroup) label(op *inFlight) string {
	return fmt.Sprintf("%s #%d (%s)", op.name, op.seq, g.engine.eng.callName(op.kind, op.async))
}

// initEngineGroup makes a group whose operations run on o.Backend's engine.
func initEngineGroup(o Options) (*ProcessGroup, error) {
	newEngine := newEngines[o.Backend]
	if newEngine == nil {
		return nil, fmt.Errorf("ddp: backend %q is not built into this program: rebuild it with go build -tags %s "+
			"(needs Open MPI's libopenmpi-dev; make deps installs it), or use the default tcp backend", o.Backend, o.Backend)
	}
	eng, world, err := newEngine(o)
	if err != nil {
		return nil, err
	}
	g := &ProcessGroup{rank: world.rank, size: world.size, localRank: world.localRank, localWorldSize: world.localSize,
		timeout: o.Timeout, debug: o.Debug, peers: make([]*peer, world.size), ops: make(chan *Work, 1024),
		engine: &engineState{eng: eng, wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}),
			departed: -1}}
	if o.BindCPUs {
		if err := bindLocalCPUs(g.localRank, g.localWorldSize); err != nil {
			return nil, errors.Join(err, eng.close())
		}
	}
	g.wg.Add(1)
	go g.executor()
	go g.watchEngine()
	return g, nil
}

// checkEngineWorld compares the world an engine reports with what the
// options and the environment say, which a launcher other than the
// engine's own would have set.
func checkEngineWorld(o Options, w engineWorld, launcher string) error {
	env, err := workerenv.Parse(os.Getenv)
	if err != nil {
		return fmt.Errorf("ddp: backend %s: %w", o.Backend, err)
	}
	for _, f := range []struct {
		name           string
		given, env, is int
	}{{EnvRank, o.Rank, env.Rank, w.rank}, {EnvWorldSize, o.WorldSize, env.WorldSize, w.size}} {
		v := f.given
		if v == -1 {
			if f.env == workerenv.Unset {
				continue
			}
			v = f.env
		}
		if v != f.is {
			return fmt.Errorf("ddp: backend %s: %s=%d, but %s made this process rank %d of %d: the %s backend takes its "+
				"ranks from %s (start the job with %s), or unset %s", o.Backend, f.name, v, launcher, w.rank, w.size,
				o.Backend, launcher, launcher, f.name)
		}
	}
	return nil
}

// describe is c as the debug check compares it (the TCP transport's
// descriptions, so messages read alike on both).
func describe(c *engineCall) string {
	switch c.kind {
	case opAllReduce:
		return fmt.Sprintf("AllReduce(%s, %s)", c.op, c.buf)
	case opBroadcast:
		return fmt.Sprintf("Broadcast(root %d, %s)", c.root, c.buf)
	case opAllGather:
		return fmt.Sprintf("AllGather(%s)", c.in)
	case opReduceScatter:
		return fmt.Sprintf("ReduceScatter(%s, %s)", c.op, c.in)
	case opAllToAll:
		return fmt.Sprintf("AllToAllSingle(%s)", c.in.DType)
	case opGather:
		return fmt.Sprintf("Gather(root %d, %s)", c.root, c.in)
	case opScatter:
		return fmt.Sprintf("Scatter(root %d, %s)", c.root, c.out)
	case opSend, opRecv:
		return fmt.Sprintf("%s(rank %d, tag %d, %s)", map[opKind]string{opSend: "Send", opRecv: "Recv"}[c.kind], c.root, c.tag, c.buf)
	}
	return "Barrier"
}

// engineDebugCheck is debugCheck for an engine: every rank gathers every
// rank's description of the collective it is about to run.
func (g *ProcessGroup) engineDebugCheck(seq uint64, c *engineCall) error {
	if !g.debug || g.size == 1 {
		return nil
	}
	mine := make([]int64, fingerprintSize/8)
	copy(int64Bytes(mine), fmt.Sprintf("#%d %s", seq, describe(c)))
	all := make([]int64, len(mine)*g.size)
	if err := g.engine.eng.run(engineCall{kind: opAllGather, in: Int64s(mine), out: Int64s(all)}); err != nil {
		return err
	}
	parts := make([][]byte, g.size)
	for r := range parts {
		parts[r] = int64Bytes(all[r*len(mine) : (r+1)*len(mine)])
	}
	return compareFingerprints(seq, parts, int64Bytes(mine))
}

func int64Bytes(x []int64) []byte { return Int64s(x).bytes }

// runEngineCollective runs collective seq, c, with the debug check, as
// the engine's blocking call under the watchdog (with the caller's ctx
// when it runs inline), and then finish (may be nil). A zero deadline is
// set by the watchdog when it first sees the operation, within
// engineTick: reading the clock costs a small all-reduce more than
// anything else the group does.
func (g *ProcessGroup) runEngineCollective(name string, c engineCall, finish func(), callerCtx context.Context, seq uint64, deadline time.Time) error {
	if err := g.engineDebugCheck(seq, &c); err != nil {
		return err
	}
	s := g.engine
	s.mu.Lock()
	if s.departed >= 0 && seq > s.departedAfter {
		// It could never finish: fail it before MPI sees it.
		err := s.departure()
		s.mu.Unlock()
		return err
	}
	if !s.deadlineCap.IsZero() && (deadline.IsZero() || deadline.After(s.deadlineCap)) {
		deadline = s.deadlineCap
	}
	s.running = inFlight{name: name, seq: seq, kind: c.kind, deadline: deadline, ctx: callerCtx}
	s.isRunning = true
	s.mu.Unlock()
	err := s.eng.run(c)
	s.mu.Lock()
	s.isRunning = false
	s.running.ctx = nil
	s.mu.Unlock()
	if err == nil && finish != nil {
		finish()
	}
	return err
}

// engineRun runs collective c in its place in the group's order: on the
// caller's goroutine when nothing is queued (no allocation), else on the
// executor.
func (g *ProcessGroup) engineRun(ctx context.Context, name string, c engineCall, finish func()) error {
	if seq, ok := g.beginInline(); ok {
		return g.endInline(name, seq, g.runEngineCollective(name, c, finish, ctx, seq, time.Time{}))
	}
	return g.engineQueue(name, c, finish).Wait(ctx)
}

// engineQueue queues collective c for the executor.
func (g *ProcessGroup) engineQueue(name string, c engineCall, finish func()) *Work {
	return g.submit(name, func(seq uint64, deadline time.Time) error {
		return g.runEngineCollective(name, c, finish, nil, seq, deadline)
	})
}

// engineOp is engineRun for the operations whose Async variant shares
// their code: a nil ctx (the Async variant) queues c and returns at once.
func (g *ProcessGroup) engineOp(ctx context.Context, name string, c engineCall, finish func()) *Work {
	if ctx == nil {
		return g.engineQueue(name, c, finish)
	}
	return finished(name, g.engineRun(ctx, name, c, finish))
}

// engineP2P starts a Send or Recv as the engine's nonblocking call; the
// watchdog completes its Work. They are numbered apart from collectives.
func (g *ProcessGroup) engineP2P(name string, c engineCall) *Work {
	g.mu.Lock()
	if err := g.refusal(); err != nil {
		g.mu.Unlock()
		return finished(name, err)
	}
	g.p2pSeq++
	seq := g.p2pSeq
	g.mu.Unlock()
	label := fmt.Sprintf("%s (point-to-point #%d)", name, seq)
	s := g.engine
	s.mu.Lock()
	gone := s.departed == c.root
	s.mu.Unlock()
	var req engineRequest
	var err error
	if gone {
		err = &PeerError{Rank: c.root, Err: errors.New("left the group (Destroy)")}
	} else {
		req, err = s.eng.start(c)
	}
	if err != nil {
		err = g.attribute(label, err)
		g.fail(err)
		return finished(label, err)
	}
	w := &Work{name: label, group: g, done: make(chan struct{})}
	op := &inFlight{name: name + " (point-to-point)", seq: seq, kind: c.kind, async: true,
		deadline: time.Now().Add(g.timeout), req: req, work: w, peer: c.root}
	s.mu.Lock()
	s.p2p = append(s.p2p, op)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return w
}
