package xla

import (
	"context"
	"log"
	"sync"

	"github.com/xladdp/xladdp/xla/internal/progcache"
)

// ProgramExchange shares compiled programs among the processes of a job,
// so that a program is compiled once job-wide instead of once per node:
// the first process to need a program compiles it and publishes it; every
// other fetches it. Programs are named by progcache.Name, a hash of
// everything that decides the executable (the program, the plugin's
// contents, the compiler's version and flags, the lowering, XLA_FLAGS,
// the devices), so two processes share a program only when each would
// have compiled the same one. ddp provides one over the job's store.
type ProgramExchange interface {
	// Claim reports whether this process is the job's first to need the
	// program name: it compiles it, then calls done with the program's
	// encoded file (nil when its compilation failed, so that the others
	// compile it themselves). Every other process gets first false and
	// Fetches it.
	Claim(ctx context.Context, name string) (first bool, done func(file []byte), err error)
	// Fetch waits for the file the first process published. It fails
	// when that process gave up or stopped answering, or when what
	// arrives is not what was published (bounded and checksummed).
	Fetch(ctx context.Context, name string) ([]byte, error)
}

// ShareProgramsThrough makes the engine take the programs it lacks from x
// (after its disk cache), and publish the ones it compiles first. Set it
// before the first MarkStep; nil stops sharing.
func (e *Engine) ShareProgramsThrough(x ProgramExchange) {
	e.cache.shared.Lock()
	defer e.cache.shared.Unlock()
	e.cache.x = x
}

// sharing is the programCache's part in a job-wide exchange.
type sharing struct {
	shared sync.Mutex
	x      ProgramExchange
}

func (c *programCache) exchange() ProgramExchange {
	c.shared.Lock()
	defer c.shared.Unlock()
	return c.x
}

// fromJob returns the program the job's first process compiled, or nil
// with the done to call once this process compiled it itself: as the
// first, to publish it; after a fetch that failed (said in the log), to
// nothing. A published file that is not want's program is never used.
func (c *programCache) fromJob(want progcache.Header, devices []*Device) (*program, func(file []byte)) {
	nothing := func([]byte) {}
	x := c.exchange()
	if x == nil {
		return nil, nothing
	}
	name := progcache.Name(want)
	first, done, err := x.Claim(c.closing, name)
	switch {
	case err != nil:
		log.Printf("xladdp: compiling the program here: the job's program exchange: %v", err)
		return nil, nothing
	case first:
		return nil, func(file []byte) {
			done(file)
			if file != nil {
				metrics.programPublished()
			}
		}
	}
	file, err := x.Fetch(c.closing, name)
	var p *program
	if err == nil {
		var h progcache.Header
		var executable []byte
		if h, executable, err = progcache.Decode(file, want); err == nil {
			p, err = c.load(h, executable, devices)
		}
	}
	if err != nil {
		log.Printf("xladdp: compiling program %.12s here: not taking it from the job: %v", name, err)
		return nil, nothing
	}
	metrics.programFetched()
	if c.disk.Dir != "" {
		if err := c.disk.StoreFile(want, file); err != nil && debugEnabled() {
			log.Printf("xladdp: persistent cache: not saving %s: %v", c.disk.Path(want), err)
		}
	}
	return p, nothing
}
