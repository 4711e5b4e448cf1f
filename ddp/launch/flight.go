package launch

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/flight"
	"github.com/xladdp/xladdp/ddp/internal/procset"
	"github.com/xladdp/xladdp/internal/procfs"
	"github.com/xladdp/xladdp/internal/workerenv"
)

// flightWait bounds how long a failing attempt waits for the flight
// records of its workers still running (a stopped one never writes).
const flightWait = 2 * time.Second

// checkFlightDir refuses, before any worker starts, a $XLADDP_FLIGHT_DIR
// that cannot hold the flight records.
func checkFlightDir(environ []string) error {
	dir := userFlightDir(environ)
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("$%s=%s cannot hold the workers' flight records (%v): give a writable directory, or unset it",
			workerenv.FlightDir, dir, err)
	}
	return nil
}

// userFlightDir is environ's $XLADDP_FLIGHT_DIR, or "".
func userFlightDir(environ []string) string { return lookupIn(environ)(workerenv.FlightDir) }

// flightJob names this ddprun's records under $XLADDP_FLIGHT_DIR: an
// earlier job's, in the same directory, are never read as this one's.
var flightJob = fmt.Sprintf("job-%s-%d", time.Now().UTC().Format("20060102-150405"), os.Getpid())

// flightDir is where attempt's workers write their flight records: under
// the user's $XLADDP_FLIGHT_DIR if environ sets it (kept, in a directory
// of this job's own: <dir>/job-<start>-<pid>/attempt_<N>), else a fresh
// temporary directory (owned: removed unless it explains a failure).
func flightDir(environ []string, attempt int) (dir string, owned bool, err error) {
	if user := userFlightDir(environ); user != "" {
		dir = filepath.Join(user, flightJob, fmt.Sprintf("attempt_%d", attempt))
		return dir, false, os.MkdirAll(dir, 0o755)
	}
	// In environ's $TMPDIR: the one the job was given (a test's own).
	parent := cmp.Or(lookupIn(environ)("TMPDIR"), os.TempDir())
	pruneFlightDirs(parent, keptFlightDirs-1) // and this one
	dir, err = os.MkdirTemp(parent, flightDirPrefix)
	return dir, true, err
}

// flightDirPrefix names ddprun's own flight directories in $TMPDIR.
const flightDirPrefix = "ddprun-flight-"

// keptFlightDirs is how many of ddprun's own flight directories, each
// kept because it explains a failure, a new one leaves in $TMPDIR.
const keptFlightDirs = 8

// pruneFlightDirs removes all but the keep newest of ddprun's own flight
// directories in parent (by modification time), so that failed jobs do
// not fill the temporary directory; another user's are left alone.
func pruneFlightDirs(parent string, keep int) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	type found struct {
		path string
		mod  time.Time
	}
	var dirs []found
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !e.IsDir() || !strings.HasPrefix(e.Name(), flightDirPrefix) || !ownedByUs(info) {
			continue
		}
		dirs = append(dirs, found{filepath.Join(parent, e.Name()), info.ModTime()})
	}
	slices.SortFunc(dirs, func(a, b found) int { return b.mod.Compare(a.mod) })
	for _, d := range dirs[min(keep, len(dirs)):] {
		_ = os.RemoveAll(d.path)
	}
}

// ownedByUs reports whether this process's user owns the file of info.
func ownedByUs(info os.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}

// collectFlight asks the workers still running to write their flight
// records (SIGUSR1, to those that catch it: a program without a process
// group would die of it), waits until each has written a fresh one, has
// exited or cannot answer (at most flightWait), and returns what dir
// holds (none from a program without a process group), or the reason the
// records are unreadable. A stopped worker (SIGSTOP, ^Z, a debugger) is
// left stopped: it stands where it stopped, and continued it would run
// on into the next collective and look ahead of the others; stoppedNote
// names it.
func (set workerSet) collectFlight(dir string) ([]flight.Dump, error) {
	asked := time.Now()
	for _, w := range set.Processes {
		if set.answers(w) {
			_ = w.Cmd.Process.Signal(syscall.SIGUSR1)
		}
	}
	for deadline := asked.Add(flightWait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if set.allAnswered(dir, asked) {
			break
		}
	}
	return flight.Read(dir)
}

// answers reports whether w can write a flight record now: running,
// not stopped, and catching SIGUSR1.
func (set workerSet) answers(w *procset.Process) bool {
	if w.Exited() {
		return false
	}
	pid := w.Cmd.Process.Pid
	return !procfs.Stopped(procfs.State("/proc", pid)) && procfs.Catches("/proc", pid, syscall.SIGUSR1)
}

// stopped lists this node's workers that are stopped now (SIGSTOP, ^Z,
// a debugger), by rank, with their pid and state.
func (set workerSet) stopped() map[int][2]string {
	out := map[int][2]string{}
	for _, w := range set.Processes {
		if w.Exited() {
			continue
		}
		pid := w.Cmd.Process.Pid
		if state := procfs.State("/proc", pid); procfs.Stopped(state) {
			out[w.Rank] = [2]string{strconv.Itoa(pid), state}
		}
	}
	return out
}

// diagnose is the diagnosis of the records of the ranks expected, with
// this node's stopped workers named as stopped, and where the others
// stand that a stopped worker never reached (its record, if any, is
// older than its stop): "rank 1 is stopped (pid 4242; kill -CONT 4242
// resumes it) and has not finished AllReduce #3; ranks 0,2 wait in
// AllReduce #3 at train.go:61". Where the others finished their last
// collective the stopped worker had joined it too, and is said past it.
func (set workerSet) diagnose(dumps []flight.Dump, readErr error, dir string, expected []int) string {
	stopped := set.stopped()
	if readErr != nil || len(stopped) == 0 {
		return diagnoseRecords(dumps, readErr, dir, expected)
	}
	var notes []string
	var others []int
	written := map[int]bool{}
	for _, d := range dumps {
		written[d.Rank] = true
	}
	name, front, ok := flight.Front(dumps)
	othersInFront := flight.WaitingIn(dumps, front)
	for _, r := range expected {
		s, isStopped := stopped[r]
		if !isStopped {
			others = append(others, r)
			continue
		}
		note := fmt.Sprintf("rank %d is %s (pid %s; kill -CONT %s resumes it)", r, s[1], s[0], s[0])
		switch {
		case ok && !written[r] && othersInFront:
			// Short of the others' collective or stopped inside it: its
			// record cannot tell, since it can write none.
			note += fmt.Sprintf(" and has not finished %s #%d", name, front)
		case ok && !written[r]:
			// The others finished it, so it joined it: it stopped outside
			// the collectives (compiling, loading, a program exchange).
			note += fmt.Sprintf(" after %s #%d, which the others finished", name, front)
		}
		notes = append(notes, note)
	}
	if rest := diagnoseRecords(dumps, nil, dir, others); rest != "" {
		notes = append(notes, rest)
	}
	return strings.Join(notes, "; ")
}

// flightDiagnosis diagnoses this node's flight records (local, or the
// error reading them from dir) and, in a job of several nodes, shares
// the last collectives of each rank with the other agents through the
// rendezvous store; whole (node 0, and a node whose own worker failed)
// also gathers theirs (waiting at most flightWait) to cover every rank,
// the others say who prints that: every node gathering every other's
// records made a failure cost the store nodes² transfers. "" when no
// rank wrote a record. behind are the ranks the records show behind the
// others.
func (set workerSet) flightDiagnosis(ctx context.Context, m meeting, a assignment, local []flight.Dump,
	readErr error, dir string, whole bool) (diagnosis string, behind []int) {
	if readErr != nil || a.nnodes == 1 {
		return set.diagnose(local, readErr, dir, set.ranks()), flight.Behind(local)
	}
	whole = whole || a.node == 0
	all, err := m.exchangeFlight(ctx, a, local, whole)
	if !whole || err != nil {
		d := set.diagnose(local, nil, dir, set.ranks())
		switch {
		case d != "" && err != nil:
			d += fmt.Sprintf(" (this node's ranks; the other nodes' records through the store: %v)", err)
		case d != "":
			d += " (this node's ranks; node 0's agent prints the whole job's)"
		}
		return d, flight.Behind(local)
	}
	return set.diagnose(all, nil, dir, flight.Ranks(a.world)), flight.Behind(all)
}

// diagnoseRecords is the diagnosis of the flight records of the ranks
// expected, or why those in dir could not be read; "" when no rank wrote
// one.
func diagnoseRecords(dumps []flight.Dump, readErr error, dir string, expected []int) string {
	switch {
	case readErr != nil:
		return fmt.Sprintf("the flight records in %s are unreadable: %v", dir, readErr)
	case len(dumps) == 0:
		return ""
	}
	return flight.Diagnose(dumps, expected)
}

// ranks are this node's workers' ranks.
func (set workerSet) ranks() []int {
	out := make([]int, len(set.Processes))
	for i, w := range set.Processes {
		out[i] = w.Rank
	}
	return out
}

// allAnswered reports whether every worker that can answer wrote a
// flight record into dir since asked.
func (set workerSet) allAnswered(dir string, asked time.Time) bool {
	for _, w := range set.Processes {
		if !set.answers(w) {
			continue
		}
		info, err := os.Stat(filepath.Join(dir, flight.DumpName(w.Rank)))
		if err != nil || info.ModTime().Before(asked.Add(-time.Second)) {
			return false
		}
	}
	return true
}

// mpiFlight is the diagnosis of the flight records mpirun's ranks
// 0..world-1 left in dir (they write them as their group fails, or as
// mpirun ends them), or "" when none did.
func mpiFlight(dir string, world int) string {
	dumps, err := flight.Read(dir)
	return diagnoseRecords(dumps, err, dir, flight.Ranks(world))
}

// flightEntriesShared is how many of each rank's last collectives an agent
// sends the others: what a diagnosis reads.
const flightEntriesShared = 16

// maxNodeFlight bounds one node's records as read from the store.
const maxNodeFlight = 8 << 20

// exchangeFlight posts this node's records (each rank's last collectives)
// under a's round and returns them with, when gather, every other
// node's that arrive within flightWait.
func (r *rendezvous) exchangeFlight(ctx context.Context, a assignment, local []flight.Dump, gather bool) ([]flight.Dump, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flightWait+time.Second)
	defer cancel()
	mine := make([]flight.Dump, len(local))
	for i, d := range local {
		mine[i] = d.Last(flightEntriesShared)
	}
	all := append([]flight.Dump(nil), local...)
	raw, err := json.Marshal(mine)
	if err == nil {
		err = r.client.Set(ctx, r.key(a.round, "flight", a.node), raw)
	}
	if err != nil {
		return all, fmt.Errorf("posting node %d's flight records: %w", a.node, err)
	}
	if !gather {
		return all, nil
	}
	got := map[int]bool{a.node: true}
	for deadline := time.Now().Add(flightWait); len(got) < a.nnodes && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for n := range a.nnodes {
			if got[n] {
				continue
			}
			theirs, posted, err := r.nodeFlight(ctx, a.round, n, a.world)
			if err != nil {
				return all, err
			}
			if posted {
				got[n] = true
				all = append(all, theirs...)
			}
		}
	}
	return all, nil
}

// nodeFlight is node's flight records of round, if it posted them:
// records that do not parse, or too large, count as posted and empty
// (the diagnosis names the ranks it misses).
func (r *rendezvous) nodeFlight(ctx context.Context, round, node, world int) (_ []flight.Dump, posted bool, _ error) {
	key := r.key(round, "flight", node)
	ok, err := r.client.Check(ctx, key)
	if err != nil {
		return nil, false, fmt.Errorf("reading node %d's flight records: %w", node, err)
	}
	if !ok[0] {
		return nil, false, nil
	}
	raw, err := r.client.Get(ctx, key)
	if err != nil {
		return nil, true, fmt.Errorf("reading node %d's flight records: %w", node, err)
	}
	var theirs, kept []flight.Dump
	if len(raw) > maxNodeFlight || json.Unmarshal(raw, &theirs) != nil {
		return nil, true, nil
	}
	for _, d := range theirs {
		if d.Rank >= 0 && d.Rank < world {
			kept = append(kept, d)
		}
	}
	return kept, true, nil
}

// answerFlightRequest has the workers write their flight records, leaving
// them running, and prints the diagnosis of this node's ranks; it reports
// whether there was one to keep.
func (set workerSet) answerFlightRequest(dir string, stderr io.Writer) bool {
	local, err := set.collectFlight(dir)
	msg := ""
	switch {
	case err != nil:
		msg = fmt.Sprintf("ddprun: flight record on request (%s): unreadable: %v", dir, err)
	case len(local) > 0:
		msg = fmt.Sprintf("ddprun: flight record on request (%s): %s", dir, set.diagnose(local, nil, dir, set.ranks()))
	default:
		msg = "ddprun: flight record on request: no worker has a process group yet"
	}
	consoleMu.Lock()
	fmt.Fprintln(stderr, msg)
	consoleMu.Unlock()
	return len(local) > 0
}
