package ddp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
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

// watchEngine is the group's watchdog, from InitProcessGroup to Destroy:
// it drives the point-to-point operations to completion (testing them is
// what makes an MPI library progress) and aborts the job when any
// operation outlives its deadline, as NCCL's watchdog does, since none
// can be cancelled.
func (g *ProcessGroup) watchEngine() {
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
func (g *ProcessGroup) complete(op *inFlight, err error) {
	s := g.engine
	s.mu.Lock()
	s.p2p = slices.DeleteFunc(s.p2p, func(p *inFlight) bool { return p == op })
	s.mu.Unlock()
	if err != nil {
		err = g.attribute(op.work.name, err)
		g.fail(err)
	}
	op.work.err = err
	close(op.work.done)
}

// noticeDepartures acts on peers that left the group (their Destroy), as
// closed connections do on TCP. A collective numbered past a peer's last
// can never finish: one already running aborts the job at once naming
// that rank, later ones fail before they start (runEngineCollective);
// collectives up to its last still run, since this rank may not have
// reached them yet. Point-to-point operations with the peer get
// engineAbortGrace (a message it sent before leaving may still be
// arriving); new ones fail.
func (g *ProcessGroup) noticeDepartures() {
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
		by := time.Now().Add(engineAbortGrace)
		for _, op := range s.p2p {
			if op.peer == r && op.deadline.After(by) {
				op.deadline = by
			}
		}
		s.mu.Unlock()
		if doomed != nil {
			g.abortJob(doomed, fmt.Sprintf("rank %d left the group (Destroy) after collective #%d, so it never joins this one", r, last))
		}
	}
}

// departure is the error of an operation a departed peer never joins
// (s.mu held).
func (s *engineState) departure() error {
	return &PeerError{Rank: s.departed, Err: fmt.Errorf("left the group (Destroy) after collective #%d", s.departedAfter)}
}

// enforceDeadlines aborts the job for the running collective past its
// deadline, or for late, a point-to-point operation past its own (both
// copies taken under s.mu); an inline collective whose caller's ctx ended
// breaks the group, which gives it engineAbortGrace more.
func (g *ProcessGroup) enforceDeadlines(now time.Time, running, late *inFlight) {
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
func (g *ProcessGroup) abortJob(op *inFlight, cause string) {
	g.mu.Lock()
	why := g.broken
	g.mu.Unlock()
	msg := fmt.Sprintf("ddp: rank %d: %s did not finish within the %v timeout; it cannot be cancelled, so the job "+
		"is aborted (is a rank stalled, or did the ranks call different collectives? XLADDP_DEBUG=1 checks)", g.rank, g.label(op), g.timeout)
	switch {
	case cause != "":
		msg = fmt.Sprintf("ddp: rank %d: %s cannot finish: %s; the job is aborted", g.rank, g.label(op), cause)
	case why != nil:
		msg = fmt.Sprintf("ddp: rank %d: %s was still running %v after the group failed (%v); it cannot be "+
			"cancelled, so the job is aborted", g.rank, g.label(op), engineAbortGrace, why)
	}
	fmt.Fprintln(os.Stderr, msg)
	g.engine.eng.abort()
	os.Exit(1) // abort does not return; should it, the job still ends
}

// destroyEngine ends an engine group once Destroy closed its queue: the
// operations issued before still run (the other ranks are in them too),
// all within engineAbortGrace or the job is aborted; then later ones fail
// and the engine is released.
func (g *ProcessGroup) destroyEngine() error {
	s := g.engine
	s.expedite(time.Now().Add(engineAbortGrace))
	g.wg.Wait()
	g.tails.Wait()
	g.mu.Lock()
	if g.broken == nil {
		g.broken = fmt.Errorf("ddp: rank %d: %w: it was destroyed", g.rank, ErrGroupClosed)
	}
	last := g.seq
	g.mu.Unlock()
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
	s.eng.leave(last)
	return s.eng.close()
}
