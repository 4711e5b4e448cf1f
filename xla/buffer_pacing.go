package xla

import (
	"runtime"
	"sync/atomic"
)

// bufferPacer collects Go garbage when the device buffers made since the
// last collection reach a budget. A buffer is freed when Go collects the
// tensor that holds it, and Go paces its collections by its own heap,
// which does not count device memory: the seed's MNIST job (a 57 MB Go
// heap holding the dataset, 0.4 MB of Go allocations per step) collected
// every ~120 steps while each step made 17 MB of buffers, so a rank grew
// to 4 GB and every step's outputs landed on fresh pages.
//
// bufferBudget is the device memory made between such collections: the
// MNIST job's step took 71-76 ms with no pacing, 48-52 ms with 32 MiB (a
// collection every other step), 45-46 ms with 128 and 512 MiB.
type bufferPacer struct {
	since atomic.Int64
}

const bufferBudget = 256 << 20

// made counts n bytes of new device buffers.
func (p *bufferPacer) made(n int64) { p.since.Add(n) }

// collected restarts the count after a collection made for another reason.
func (p *bufferPacer) collected() { p.since.Store(0) }

// collectIfDue collects once the budget is spent; one caller collects
// when groups finish steps together.
func (p *bufferPacer) collectIfDue() {
	if since := p.since.Load(); since < bufferBudget || !p.since.CompareAndSwap(since, 0) {
		return
	}
	runtime.GC()
	metrics.collectedForBuffers()
}
