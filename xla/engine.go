package xla

import (
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/backends"

	"github.com/xladdp/xladdp/backend"
)

// Engine runs lazy tensor programs on the devices of one backend. It owns
// the compile cache; each Device owns its trace.
type Engine struct {
	backend *backend.Backend
	gomlx   backends.Backend
	cache   *programCache
	devices []*Device
	// standalone groups run MarkStep for a device used outside RunReplicas.
	standalone []*group

	mu         sync.Mutex
	replicasOn bool
}

// NewEngine wraps an opened backend. Close the backend after the engine's
// last use.
func NewEngine(b *backend.Backend) *Engine {
	e := &Engine{backend: b, gomlx: b.GoMLX(), cache: newProgramCache(b)}
	n := b.NumDevices()
	e.devices = make([]*Device, n)
	e.standalone = make([]*group, n)
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
