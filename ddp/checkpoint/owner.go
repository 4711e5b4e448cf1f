package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/xladdp/xladdp/internal/readlimit"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// A checkpoint directory belongs to one running job: two jobs on one
// directory would resume from each other's live checkpoints and prune
// each other's files. OwnerFile names the job (and the process that took
// it) for the message another job gets, and every process of the owning
// job holds a shared flock on it while its checkpointer is open; a flock
// on the directory itself serializes the check-and-take. The kernel drops
// a dead process's flock, so a job killed with SIGKILL leaves a directory
// the next job takes over, saying so.
const (
	// OwnerFile is the file in a checkpoint directory naming its job.
	OwnerFile = ".xladdp-owner"
	// ownerMaxBytes bounds what is read of OwnerFile.
	ownerMaxBytes = 4096
	// guardWait bounds the wait for another process's check-and-take,
	// which holds the guard for a few file operations.
	guardWait = 10 * time.Second
)

// owner is who holds a checkpoint directory.
type owner struct {
	Job   string    `json:"job"`
	Host  string    `json:"host"`
	PID   int       `json:"pid"`
	Since time.Time `json:"since"`
	// RunID is the launcher's run id (TORCHELASTIC_RUN_ID), and restart
	// its restart count: a restarted round of one elastic job meets at a
	// new port, so its key differs, yet it takes over its own directory.
	RunID   string `json:"run_id,omitempty"`
	restart int
}

func (o owner) String() string {
	return fmt.Sprintf("%s (pid %d on %s, since %s)", o.Job, o.PID, o.Host, o.Since.Format(time.RFC3339))
}

// claims are this process's holds on checkpoint directories, counted:
// the local replicas of one process each open a checkpointer on the
// job's directory, and flocks are per open file, not per process.
var claims = struct {
	sync.Mutex
	byDir map[string]*claim
}{byDir: map[string]*claim{}}

type claim struct {
	live  *os.File
	count int
}

// thisOwner is this process as a directory's owner.
func thisOwner() owner {
	host, _ := os.Hostname()
	world, _ := workerenv.Parse(os.Getenv) // a bad variable is the launch's error, reported there
	return owner{Job: world.JobKey(host, os.Getpid()), Host: host, PID: os.Getpid(), Since: time.Now().UTC(),
		RunID: world.RunID, restart: world.RestartCount}
}

// claimDir makes dir this job's, or says which running job holds it. It
// returns the release to call when the checkpointer closes.
func claimDir(dir string) (func(), error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	claims.Lock()
	defer claims.Unlock()
	if c, ok := claims.byDir[abs]; ok {
		c.count++
		return func() { releaseClaim(abs) }, nil
	}
	live, err := takeDir(abs, thisOwner())
	if err != nil {
		return nil, err
	}
	claims.byDir[abs] = &claim{live: live, count: 1}
	return func() { releaseClaim(abs) }, nil
}

func releaseClaim(abs string) {
	claims.Lock()
	defer claims.Unlock()
	c := claims.byDir[abs]
	if c.count--; c.count == 0 {
		// The job's last process to leave clears its name: the next job
		// finds a directory no one holds, not one to take over.
		if syscall.Flock(int(c.live.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			_ = c.live.Truncate(0)
		}
		_ = c.live.Close() // drops the flock
		delete(claims.byDir, abs)
	}
}

// takeDir checks and takes dir under its guard: a directory of this job,
// or of none running, is taken (a running other job is refused); the
// returned file holds this process's shared flock on ownerLive.
func takeDir(dir string, me owner) (*os.File, error) {
	guard, err := lockGuard(dir)
	if err != nil {
		return nil, err
	}
	defer guard.Close()
	live, err := openOwnerFile(filepath.Join(dir, OwnerFile))
	if err != nil {
		return nil, err
	}
	prev, had, err := readOwner(live)
	if err != nil {
		live.Close()
		return nil, err
	}
	if had && prev.Job == me.Job {
		return live, flockOrClose(live, syscall.LOCK_SH)
	}
	if err := syscall.Flock(int(live.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		live.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("checkpoint: locking %s: %w", live.Name(), err)
		}
		return nil, fmt.Errorf("checkpoint: the checkpoint directory %s belongs to a running job, %s: "+
			"two jobs on one directory would resume from and prune each other's checkpoints; "+
			"give this job another --checkpoint-dir, or wait for that one to end", dir, prev)
	}
	if err := writeOwner(live, me); err != nil {
		live.Close()
		return nil, err
	}
	if had && !(me.restart > 0 && me.RunID != "" && prev.RunID == me.RunID) {
		slog.Warn("checkpoint: took over the checkpoint directory from a job that is no longer running",
			"dir", dir, "previous", prev.String())
	}
	return live, flockOrClose(live, syscall.LOCK_SH)
}

// flockOrClose sets how f is locked, closing it on failure.
func flockOrClose(f *os.File, how int) error {
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return fmt.Errorf("checkpoint: locking %s: %w", f.Name(), err)
	}
	return nil
}

// lockGuard locks dir itself for a check-and-take, waiting at most
// guardWait.
func lockGuard(dir string) (*os.File, error) {
	guard, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: opening the checkpoint directory %s: %w", dir, err)
	}
	deadline := time.Now().Add(guardWait)
	for {
		err := syscall.Flock(int(guard.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return guard, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			guard.Close()
			return nil, fmt.Errorf("checkpoint: the checkpoint directory %s stayed locked for %s (another job starting on it, "+
				"or a process stopped while starting): %w", dir, guardWait, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openOwnerFile opens (creating) the owner file, which must be a regular
// file: never a FIFO, device or link someone left in its place.
func openOwnerFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o644)
	if errors.Is(err, syscall.ELOOP) {
		// O_NOFOLLOW's answer for a symbolic link, which "too many levels
		// of symbolic links" does not make clear.
		return nil, fmt.Errorf("checkpoint: the checkpoint directory's owner file %s is a symbolic link, not a regular file: remove it", path)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: opening the checkpoint directory's owner file %s (remove it if it is not a file): %w", path, err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		kind := "unreadable"
		if err == nil {
			kind = readlimit.KindOf(st.Mode())
		}
		return nil, fmt.Errorf("checkpoint: the checkpoint directory's owner file %s is %s, not a regular file: remove it", path, kind)
	}
	return f, nil
}

// readOwner reads who f names, if anyone.
func readOwner(f *os.File) (owner, bool, error) {
	b, err := io.ReadAll(io.NewSectionReader(f, 0, ownerMaxBytes))
	if err != nil {
		return owner{}, false, fmt.Errorf("checkpoint: reading %s: %w", f.Name(), err)
	}
	if len(b) == 0 {
		return owner{}, false, nil
	}
	var o owner
	if json.Unmarshal(b, &o) != nil || o.Job == "" {
		return owner{Job: "an unknown job (its owner file is unreadable)"}, true, nil
	}
	return o, true, nil
}

// writeOwner names me in f, which this process holds exclusively.
func writeOwner(f *os.File, me owner) error {
	b, err := json.Marshal(me)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("checkpoint: naming this job in %s: %w", f.Name(), err)
	}
	if _, err := f.WriteAt(append(b, '\n'), 0); err != nil {
		return fmt.Errorf("checkpoint: naming this job in %s: %w", f.Name(), err)
	}
	return nil
}
