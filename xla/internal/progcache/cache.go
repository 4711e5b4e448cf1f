package progcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Key identifies a program in memory.
type Key struct {
	Fingerprint string
	Devices     string
}

// ErrClosed: Get after Close.
var ErrClosed = errors.New("progcache: the program cache is closed")

// Cache holds compiled programs of type P by Key.
type Cache[P any] struct {
	mu      sync.Mutex
	entries map[Key]*entry[P]
	closed  bool
	// compiling counts compilations in flight; Close waits for them.
	compiling sync.WaitGroup
	// inFlight and peak count concurrent compilations (Peak).
	inFlight, peak int
}

// entry is a program compiled or being compiled; done closes when p and
// err are final.
type entry[P any] struct {
	done chan struct{}
	p    P
	err  error
}

// New returns an empty cache.
func New[P any]() *Cache[P] { return &Cache[P]{entries: map[Key]*entry[P]{}} }

// Get returns the program under key (hit reports it was there or being
// compiled by another caller). On a miss, lower runs on the caller's
// goroutine, where it may read what the caller owns, and returns compile,
// which runs on the cache's goroutine and may read only what lower gave
// it. If ctx ends first, Get returns at once with its cause; the
// compilation goes on and is cached. A failed compilation is not cached:
// the next Get tries again.
func (c *Cache[P]) Get(ctx context.Context, key Key, lower func() (compile func() (P, error), err error)) (p P, hit bool, err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return p, false, ErrClosed
	}
	e, hit := c.entries[key]
	if !hit {
		e = &entry[P]{done: make(chan struct{})}
		c.entries[key] = e
	}
	c.mu.Unlock()
	if !hit {
		compile, err := lower()
		if err != nil {
			c.finish(key, e, p, err)
			return p, false, err
		}
		c.start(key, e, compile)
	}
	select {
	case <-e.done:
		return e.p, hit, e.err
	default:
	}
	select {
	case <-e.done:
		return e.p, hit, e.err
	case <-ctx.Done():
		return p, hit, fmt.Errorf("stopped waiting for the compilation (it goes on, and is cached): %w", context.Cause(ctx))
	}
}

// start runs compile on a goroutine of the cache's, which Close waits for.
func (c *Cache[P]) start(key Key, e *entry[P], compile func() (P, error)) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		var none P
		c.finish(key, e, none, ErrClosed)
		return
	}
	c.compiling.Add(1)
	c.inFlight++
	c.peak = max(c.peak, c.inFlight)
	c.mu.Unlock()
	go func() {
		defer c.compiling.Done()
		p, err := compile()
		c.mu.Lock()
		c.inFlight--
		c.mu.Unlock()
		c.finish(key, e, p, err)
	}()
}

// finish makes p and err e's result; a failure leaves the cache.
func (c *Cache[P]) finish(key Key, e *entry[P], p P, err error) {
	c.mu.Lock()
	if err != nil && c.entries[key] == e {
		delete(c.entries, key)
	}
	c.mu.Unlock()
	e.p, e.err = p, err
	close(e.done)
}

// Compiling is how many compilations run now.
func (c *Cache[P]) Compiling() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight
}

// Peak is the most compilations that have run at once.
func (c *Cache[P]) Peak() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak
}

// Close waits for the compilations in flight, then hands every cached
// program to release and empties the cache; later Gets fail.
func (c *Cache[P]) Close(release func(P)) {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.compiling.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, e := range c.entries {
		select {
		case <-e.done:
			if e.err == nil {
				release(e.p)
			}
		default: // still lowering: start will find the cache closed
		}
		delete(c.entries, key)
	}
}
