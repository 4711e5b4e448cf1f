package progcache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/xladdp/xladdp/internal/procfs"
)

// lockPoll is how often a process waiting for another's compilation
// looks at its lock.
const lockPoll = 20 * time.Millisecond

// How a wait for another process's compilation is never silent nor
// endless: a word after waitNotice and every waitNotice after it, naming
// the holder and its state (every busyNotice while the holder is seen
// working); a holder seen stopped (SIGSTOP, Ctrl-Z, a
// debugger) is passed by at once, and any holder after waitLimit (a
// Neuron compile may take tens of minutes): the waiter compiles without
// the lock, saying so. Variables, so tests can shorten them.
var (
	waitNotice = 10 * time.Second
	waitLimit  = 60 * time.Minute
	// busyNotice is how often a holder seen working (its CPU time moved
	// since the last look) is named: a normal compilation of a few tens
	// of seconds on the node's other rank is not news every 10 s.
	busyNotice = time.Minute
)

// Lock takes want's entry lock (an flock on <entry>.lock, which the
// kernel drops if its holder dies), so that of the processes sharing the
// directory (the ranks of a node, or of every node on a shared file
// system) one compiles a program while the others wait, then load it.
// While it waits it tells say who holds the lock; it gives up waiting on
// a stopped holder or after waitLimit, returning an unlock that does
// nothing (the program is compiled without the lock, and written to the
// cache atomically as ever), and when ctx ends, with ctx's cause.
func (c *Disk) Lock(ctx context.Context, want Header, say func(string)) (unlock func(), err error) {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	path := c.Path(want) + ".lock"
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	nextWord, said := start.Add(waitNotice), start
	var cpu uint64
	sampled := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if !sampled {
			_, _, _ = describeHolder(path, &cpu) // the holder's CPU time when the wait began
			sampled = true
		}
		if now := time.Now(); !now.Before(nextWord) {
			nextWord = now.Add(waitNotice)
			holder, stopped, working := describeHolder(path, &cpu)
			waited := now.Sub(start).Round(time.Second)
			switch {
			case stopped || now.Sub(start) >= waitLimit:
				f.Close()
				say(fmt.Sprintf("xladdp: waited %s for %s to compile a program (lock %s); compiling it without the lock", waited, holder, path))
				return func() {}, nil
			case !working || now.Sub(said) >= busyNotice:
				said = now
				say(fmt.Sprintf("xladdp: waiting %s for %s to compile a program (lock %s); compiling without the lock after %s",
					waited, holder, path, waitLimit))
			}
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another process's compilation (%s): %w", path, context.Cause(ctx))
		case <-time.After(lockPoll):
		}
	}
}

// describeHolder names the process holding the lock at path, with its
// command line and state, and reports whether it is stopped, and whether
// it is working: its CPU time moved since *cpu, the count at the last
// look, which it updates.
func describeHolder(path string, cpu *uint64) (who string, stopped, working bool) {
	pid, ok := procfs.FlockHolder("/proc", path)
	if !ok {
		return "another process (not visible here: another host, or another PID namespace)", false, false
	}
	state := procfs.State("/proc", pid)
	who = fmt.Sprintf("process %d (%s", pid, procfs.CommandLine("/proc", pid))
	if state != "" {
		who += "; " + state
	}
	ticks, _ := procfs.CPUTicks("/proc", pid)
	working, *cpu = ticks > *cpu, ticks
	return who + ")", procfs.Stopped(state), working
}
