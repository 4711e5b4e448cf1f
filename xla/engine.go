package xla

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gomlx/compute"

	"github.com/xladdp/xladdp/backend"
)

// Engine runs lazy tensor programs on the devices of one backend. It owns
// the compile cache; each Device owns its trace.
type Engine struct {
	backend *backend.Backend
	gomlx   compute.Backend
	cache   *programCache
	devices []*Device
	// standalone groups run MarkStep for a device used outside RunReplicas.
	standalone []*group

	mu         sync.Mutex
	replicasOn bool
	// replicaTimeout bounds how long a replica waits in MarkStep for the
	// others (SetReplicaTimeout).
	replicaTimeout time.Duration
	// compileOnly: MarkStep compiles without executing (EnvCompileOnly);
	// compileOnlyErr is an unreadable EnvCompileOnly, reported by MarkStep.
	compileOnly    bool
	compileOnlyErr error
	// buffers paces Go's collections by the device memory made (buffer_pacing.go).
	buffers bufferPacer
	// kept is the work Close waits for before closing (KeepOpen).
	kept sync.WaitGroup
}

// DefaultReplicaTimeout bounds a replica's wait in MarkStep for the other
// replicas when ctx has no earlier deadline, as torch's process-group
// timeout does: a replica stuck elsewhere fails the job, naming itself,
// instead of hanging it.
const DefaultReplicaTimeout = 10 * time.Minute

// NewEngine wraps an opened backend; Engine.Close closes both.
func NewEngine(b *backend.Backend) *Engine {
	e := &Engine{backend: b, gomlx: b.GoMLX(), cache: newProgramCache(b), replicaTimeout: DefaultReplicaTimeout}
	e.compileOnly, e.compileOnlyErr = compileOnlyFromEnv()
	n := b.NumDevices()
	e.devices = make([]*Device, n)
	e.standalone = make([]*group, n)
	b.OnClose(e.cache.release)
	for i := range n {
		e.devices[i] = newDevice(e, i)
		e.standalone[i] = newGroup(e, []*Device{e.devices[i]})
	}
	return e
}

// NumDevices returns how many local devices the engine drives.
func (e *Engine) NumDevices() int { return len(e.devices) }

// Device returns local device i (torch-xla's xla_device(i)). It panics if i
// is out of range: that is a programming error, not bad input.
func (e *Engine) Device(i int) *Device {
	if i < 0 || i >= len(e.devices) {
		panic(fmt.Sprintf("xla: Device(%d): the engine has devices 0..%d", i, len(e.devices)-1))
	}
	return e.devices[i]
}

// Backend returns the backend the engine runs on.
func (e *Engine) Backend() *backend.Backend { return e.backend }

// SetReplicaTimeout sets how long a replica waits in MarkStep for the
// others before the step fails, naming the missing replicas (default
// DefaultReplicaTimeout). Set it before RunReplicas.
func (e *Engine) SetReplicaTimeout(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("xla: SetReplicaTimeout(%s): must be positive", d)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.replicaTimeout = d
	return nil
}

func (e *Engine) waitLimit() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.replicaTimeout
}

// enter marks a use of the backend in flight (see backend.Acquire): after
// Close it fails with an error wrapping backend.ErrClosed.
func (e *Engine) enter(op string) (release func(), err error) {
	release, err = e.backend.Acquire(op)
	if err != nil {
		return nil, fmt.Errorf("xla: %w", err)
	}
	return release, nil
}

// Close closes the engine and its backend. It first waits for the work
// kept open (KeepOpen: a checkpoint written in the background); then new
// uploads, MarkSteps and reads fail with an error wrapping
// backend.ErrClosed, and the work in flight (an upload on a loader
// goroutine, a running step) finishes first. The compiled programs are
// released after that and before the client goes. Closing twice is a
// no-op.
func (e *Engine) Close() error {
	e.kept.Wait()
	if e.backend.Closed() {
		return nil
	}
	return errors.Join(appendMetrics(), e.backend.Close())
}

// KeepOpen delays Close until release (which may be called more than
// once): for work that outlives the call that started it and still reads
// the device, such as a checkpoint written in the background, which Close
// would otherwise fail halfway.
func (e *Engine) KeepOpen() (release func()) {
	e.kept.Add(1)
	return sync.OnceFunc(e.kept.Done)
}
