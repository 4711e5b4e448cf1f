package xla

import (
	"context"
	"log/slog"
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
	// Have says this process has the program name without the
	// exchange: from its disk cache, or compiled here after a Fetch that
	// failed. Once every process of the job has a program, published or
	// fetched or told by Have, the exchange frees what it holds of it;
	// a process that loads programs from a disk cache shared with its
	// node would otherwise keep them in the job's store to the end.
	Have(ctx context.Context, name string)
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

// have tells the job's exchange, if any, that this process has want's
// program (from its disk cache).
func (c *programCache) have(want progcache.Header) {
	if x := c.exchange(); x != nil {
		x.Have(c.closing, progcache.Name(want))
	}
}

// fromJob returns the program the job's first process compiled, or nil
// with the done to call once this process compiled it itself (nil: it
// did not): as the first, to publish it; after a fetch that failed (said
// in the log), to tell the exchange it has it. A published file that is
// not want's program is never used.
func (c *programCache) fromJob(want progcache.Header, devices []*Device) (*program, func(file []byte)) {
	x := c.exchange()
	if x == nil {
		return nil, func([]byte) {}
	}
	name := progcache.Name(want)
	compiledHere := func(file []byte) {
		if file != nil {
			x.Have(c.closing, name)
		}
	}
	first, done, err := x.Claim(c.closing, name)
	switch {
	case err != nil:
		slog.Warn("xladdp: compiling the program here: the job's program exchange failed", "err", err)
		return nil, compiledHere
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
		slog.Warn("xladdp: compiling the program here, not taking it from the job", "program", name[:min(len(name), 12)], "err", err)
		return nil, compiledHere
	}
	metrics.programFetched()
	if c.disk.Dir != "" {
		if err := c.disk.StoreFile(want, file); err != nil && debugEnabled() {
			slog.Info("xladdp: persistent cache: not saving the program", "path", c.disk.Path(want), "err", err)
		}
	}
	return p, func([]byte) {}
}
