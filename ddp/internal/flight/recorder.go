package flight

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// State is how far an operation got.
type State uint8

// An operation is issued by the caller, started by the transport, then
// done or failed.
const (
	Issued State = iota + 1
	Started
	Done
	Failed
)

func (s State) String() string {
	switch s {
	case Issued:
		return "issued"
	case Started:
		return "started"
	case Done:
		return "done"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// callerDepth is how many frames an entry keeps to find the user's.
const callerDepth = 24

// Op is what an entry records of an operation when it is issued.
type Op struct {
	// Seq numbers the operation: collectives in the order every rank
	// shares, point-to-point operations (P2P) apart.
	Seq   uint64
	P2P   bool
	Name  string // "AllReduce"
	DType string // "float32"; "" for a barrier
	Count int    // elements per rank
	Peer  int    // a point-to-point operation's peer or a root; -1 if none
}

// entry is one slot of the ring: an operation and its progress.
type entry struct {
	op                     Op
	issued, started, ended int64 // unix nanoseconds; 0 if not yet
	state                  State
	pcs                    [callerDepth]uintptr
	// gen identifies the operation in the slot, so a late Start or End
	// for an overwritten one is ignored.
	gen uint64
}

// Recorder keeps the last Size operations of one process group.
type Recorder struct {
	mu   sync.Mutex
	ring []entry
	gen  uint64 // operations recorded so far
}

// DefaultSize is how many operations a recorder keeps.
const DefaultSize = 2048

// New returns a recorder of the last size operations; of size 0, one that
// records nothing.
func New(size int) *Recorder {
	return &Recorder{ring: make([]entry, max(0, size))}
}

// ID names a recorded operation for Start and End.
type ID uint64

// Issue records op, issued now by the caller of the function skip frames
// up (0: Issue's caller); it does not allocate.
func (r *Recorder) Issue(op Op, skip int) ID {
	if len(r.ring) == 0 {
		return 0
	}
	var pcs [callerDepth]uintptr
	runtime.Callers(skip+2, pcs[:])
	now := time.Now().UnixNano()
	r.mu.Lock()
	r.gen++
	e := &r.ring[(r.gen-1)%uint64(len(r.ring))]
	*e = entry{op: op, issued: now, state: Issued, pcs: pcs, gen: r.gen}
	r.mu.Unlock()
	return ID(r.gen)
}

// Start marks id running.
func (r *Recorder) Start(id ID) {
	now := time.Now().UnixNano()
	r.mu.Lock()
	if e := r.slot(id); e != nil {
		e.started, e.state = now, Started
	}
	r.mu.Unlock()
}

// End marks id done, or failed when err is not nil.
func (r *Recorder) End(id ID, err error) {
	now := time.Now().UnixNano()
	r.mu.Lock()
	if e := r.slot(id); e != nil {
		e.ended, e.state = now, Done
		if err != nil {
			e.state = Failed
		}
		if e.started == 0 {
			e.started = now
		}
	}
	r.mu.Unlock()
}

// slot is id's entry, or nil once the ring wrapped over it (r.mu held).
func (r *Recorder) slot(id ID) *entry {
	if id == 0 || uint64(id) > r.gen || r.gen-uint64(id) >= uint64(len(r.ring)) {
		return nil
	}
	e := &r.ring[(uint64(id)-1)%uint64(len(r.ring))]
	if e.gen != uint64(id) {
		return nil
	}
	return e
}

// Entry is a recorded operation as a dump shows it.
type Entry struct {
	Op
	State State
	// Caller is the first frame outside xladdp's library (file:line), the
	// user code that issued the operation.
	Caller                 string
	Issued, Started, Ended time.Time
}

// Snapshot returns the recorded operations, oldest first.
func (r *Recorder) Snapshot() []Entry {
	r.mu.Lock()
	n := min(r.gen, uint64(len(r.ring)))
	raw := make([]entry, 0, n)
	for g := r.gen - n + 1; g <= r.gen; g++ {
		raw = append(raw, r.ring[(g-1)%uint64(len(r.ring))])
	}
	r.mu.Unlock()
	out := make([]Entry, len(raw))
	for i, e := range raw {
		out[i] = Entry{Op: e.op, State: e.state, Caller: userFrame(e.pcs[:]),
			Issued: unixTime(e.issued), Started: unixTime(e.started), Ended: unixTime(e.ended)}
	}
	return out
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// libraryPrefixes are the packages whose frames are xladdp's own, not
// the user's: the process group, the wrapper and the engine under it.
var libraryPrefixes = []string{
	"github.com/xladdp/xladdp/ddp.", "github.com/xladdp/xladdp/ddp/", "github.com/xladdp/xladdp/xla.",
	"github.com/xladdp/xladdp/xla/", "github.com/xladdp/xladdp/internal/", "runtime.",
}

// userFrame is the first of pcs outside the library or in a test file, as
// file:line (the last frame seen when all are the library's).
func userFrame(pcs []uintptr) string {
	frames := runtime.CallersFrames(pcs)
	last := ""
	for {
		f, more := frames.Next()
		if f.PC == 0 {
			break
		}
		last = f.File + ":" + strconv.Itoa(f.Line)
		// A test's frames are the user's, the library's tests included.
		if !isLibrary(f.Function) || strings.HasSuffix(f.File, "_test.go") {
			return last
		}
		if !more {
			break
		}
	}
	return last
}

func isLibrary(function string) bool {
	for _, p := range libraryPrefixes {
		if strings.HasPrefix(function, p) {
			return true
		}
	}
	return false
}
