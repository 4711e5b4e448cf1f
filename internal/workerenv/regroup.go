package workerenv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/xladdp/xladdp/internal/atomicfile"
	"github.com/xladdp/xladdp/internal/quote"
	"github.com/xladdp/xladdp/internal/readlimit"
)

// A worker ddprun started with RegroupDir set, whose every replica
// committed the last step it completed after a peer's loss, does not
// exit: it says so in its note (Regrouping), and waits for its agent's
// next assignment in RegroupDir (WriteRegroup), its place in the job
// without the lost node, which it joins in the same process.

// Regrouping starts the note of a worker that committed and waits for
// its next assignment, alive.
const Regrouping = "regrouping "

// RegroupFile is where the assignment of local rank lr after round
// (its TORCHELASTIC_RESTART_COUNT) lies in dir.
func RegroupFile(dir string, lr, round int) string {
	return filepath.Join(dir, fmt.Sprintf("local-rank-%d-after-round-%d.env", lr, round))
}

// WriteRegroup writes env, NAME=value entries, as the assignment of
// local rank lr after round, atomically.
func WriteRegroup(dir string, lr, round int, env []string) error {
	for _, kv := range env {
		if err := regroupEntry(kv); err != nil {
			return err
		}
	}
	return atomicfile.Write(RegroupFile(dir, lr, round), []byte(strings.Join(env, "\n")+"\n"))
}

// maxRegroup bounds an assignment: a few dozen variables.
const maxRegroup = 64 << 10

// regroupPoll is how often AwaitRegroup looks for its assignment.
const regroupPoll = 20 * time.Millisecond

// AwaitRegroup waits up to timeout (or ctx's end) for the assignment of
// local rank lr after round in dir and returns its entries, each a
// variable a launcher places a worker with (Names, FlightDir, Threads):
// anything else, a file that is no regular one, or one over 64 KiB is
// refused. It removes the file it read.
func AwaitRegroup(ctx context.Context, dir string, lr, round int, timeout time.Duration) ([]string, error) {
	path := RegroupFile(dir, lr, round)
	ctx, cancel := context.WithTimeoutCause(ctx, timeout,
		fmt.Errorf("no assignment from ddprun in %v (%s)", timeout, path))
	defer cancel()
	tick := time.NewTicker(regroupPoll)
	defer tick.Stop()
	for {
		err := readlimit.CheckRegular(path)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("the assignment after a peer's loss: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-tick.C:
		}
	}
	data, err := readlimit.ReadFile(ctx, path, maxRegroup, nil)
	if err != nil {
		return nil, fmt.Errorf("the assignment after a peer's loss: %w", err)
	}
	_ = os.Remove(path)
	var env []string
	for line := range strings.Lines(string(data)) {
		kv := strings.TrimRight(line, "\n")
		if kv == "" {
			continue
		}
		if err := regroupEntry(kv); err != nil {
			return nil, fmt.Errorf("the assignment after a peer's loss (%s): %w", path, err)
		}
		env = append(env, kv)
	}
	if len(env) == 0 {
		return nil, fmt.Errorf("the assignment after a peer's loss (%s) is empty", path)
	}
	return env, nil
}

// regroupEntry refuses an entry that is not NAME=value of a placement
// variable.
func regroupEntry(kv string) error {
	name, _, ok := strings.Cut(kv, "=")
	if !ok || !slices.Contains(append(Names(), FlightDir, Threads), name) {
		return fmt.Errorf("%s is not a worker placement variable (NAME=value)", quote.Short(kv))
	}
	return nil
}
