package transport

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/xladdp/xladdp/ddp/store"
	"github.com/xladdp/xladdp/reduce"
)

// Kind is the operation a Call asks for.
type Kind int

const (
	AllReduce Kind = iota + 1
	Broadcast
	AllGather
	ReduceScatter
	AllToAll
	Gather
	Scatter
	Barrier
	Send
	Recv
)

// Call is one operation the group validated, numbered and timed. In-place
// operations (AllReduce, Broadcast, Send, Recv) use Buf; the others read
// In and write Out. A transport reduces Avg as Sum: the group divides.
type Call struct {
	Kind                Kind
	Buf, In, Out        Buffer
	Op                  reduce.Op
	Root                int // the root, or the peer of a Send or Recv
	Tag                 uint32
	InSplits, OutSplits []int
	// Seq numbers the call: collectives alike on every rank, point-to-point
	// operations apart.
	Seq uint64
	// Deadline bounds the call; zero (a call on the caller's goroutine)
	// leaves it to the transport, from its timeout.
	Deadline time.Time
	// Ctx is the caller's, for a call that runs on the caller's goroutine;
	// nil on the group's executor.
	Ctx context.Context
}

// Describe is c as ranks compare it (kind, dtype, length, op, root).
func (c Call) Describe() string {
	switch c.Kind {
	case AllReduce:
		return fmt.Sprintf("AllReduce(%s, %s)", c.Op, c.Buf)
	case Broadcast:
		return fmt.Sprintf("Broadcast(root %d, %s)", c.Root, c.Buf)
	case AllGather:
		return fmt.Sprintf("AllGather(%s)", c.In)
	case ReduceScatter:
		return fmt.Sprintf("ReduceScatter(%s, %s)", c.Op, c.In)
	case AllToAll:
		return fmt.Sprintf("AllToAllSingle(%s)", c.In.DType)
	case Gather:
		return fmt.Sprintf("Gather(root %d, %s)", c.Root, c.In)
	case Scatter:
		return fmt.Sprintf("Scatter(root %d, %s)", c.Root, c.Out)
	case Send, Recv:
		return fmt.Sprintf("%s(rank %d, tag %d, %s)", map[Kind]string{Send: "Send", Recv: "Recv"}[c.Kind], c.Root, c.Tag, c.Buf)
	}
	return "Barrier"
}

// Transport carries a group's operations between its processes. The
// group calls Run for collectives one at a time in issue order, and for
// point-to-point operations either in that order too or, with
// Features.StartAtIssue, through Start as they are issued.
//
// Calls are passed by value: a pointer given to an interface method
// escapes, which would cost an allocation per operation.
type Transport interface {
	// Run performs c and returns when it is done.
	Run(c Call) error
	// Start begins point-to-point c; wait, when not nil, finishes it off
	// the group's executor.
	Start(c Call) (wait func() error, err error)
	// Abort tells the transport the group failed with cause: peers
	// waiting on this rank must learn it, and calls in flight must end.
	Abort(cause error)
	// Interrupt makes calls in flight return (Destroy).
	Interrupt()
	// Close releases the transport once no call is in flight, after
	// collective lastSeq.
	Close(lastSeq uint64) error
}

// Inliner is a transport's optional fast path: whether c may run on the
// caller's goroutine when nothing is queued before it.
type Inliner interface {
	Inline(c Call) bool
}

// SharedMemory is a transport's same-host memory, when it has one.
type SharedMemory interface {
	// SharedBuffer is a buffer that collectives reduce in place.
	SharedBuffer(d DType, n int) (Buffer, error)
	HasSharedMemory() bool
	// SharedMemoryAllReduces counts the all-reduces that went through it.
	SharedMemoryAllReduces() int64
}

// Features are how a transport's calls must be ordered.
type Features struct {
	// StartAtIssue starts point-to-point operations as they are issued,
	// not in order on the group's executor.
	StartAtIssue bool
	// DrainOnDestroy lets operations issued before Destroy still run (a
	// library that cannot cancel them, whose peers are in them too).
	DrainOnDestroy bool
}

// World is where a transport's rendezvous placed this process.
type World struct {
	Rank, Size, LocalRank, LocalSize int
}

// Config is what a transport is opened with: the group's resolved options
// and its hooks.
type Config struct {
	Name       string
	InitMethod string
	// Rank, WorldSize, LocalRank and LocalWorldSize are the options' (-1
	// where the transport's launcher gives them).
	Rank, WorldSize, LocalRank, LocalWorldSize int
	Timeout                                    time.Duration
	Token                                      string
	Debug                                      bool
	// Fail breaks the group with err (a transport that learns of a
	// failure outside a call: a caller that stopped waiting).
	Fail func(err error)
	// Broken is the group's failure, or nil.
	Broken func() error
	// Dump writes the group's flight record, saying why, before a
	// transport ends the process itself (an engine that aborts the job).
	Dump func(reason string)
}

// Opened is a transport ready for calls.
type Opened struct {
	Transport Transport
	World     World
	Features  Features
	// Store is what the ranks rendezvoused through (nil when the
	// transport's launcher did it).
	Store store.Store
}

// Factory opens a transport: rendezvous with every rank, then ready.
type Factory func(ctx context.Context, c Config) (Opened, error)

var registry = struct {
	sync.Mutex
	byName map[string]Factory
}{byName: map[string]Factory{}}

// Register makes a transport available by name, as torch's
// Backend.register_backend does; a package that provides one calls it
// from init.
func Register(name string, f Factory) {
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.byName[name]; dup {
		panic("transport: " + name + " registered twice")
	}
	registry.byName[name] = f
}

// Lookup returns the transport registered under name.
func Lookup(name string) (Factory, bool) {
	registry.Lock()
	defer registry.Unlock()
	f, ok := registry.byName[name]
	return f, ok
}

var kindNames = map[Kind]string{AllReduce: "AllReduce", Broadcast: "Broadcast", AllGather: "AllGather",
	ReduceScatter: "ReduceScatter", AllToAll: "AllToAllSingle", Gather: "Gather", Scatter: "Scatter", Barrier: "Barrier",
	Send: "Send", Recv: "Recv"}

// String names the operation as the process group's API does.
func (k Kind) String() string {
	if n, ok := kindNames[k]; ok {
		return n
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}
