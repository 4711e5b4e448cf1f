package launch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/flight"
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
func userFlightDir(environ []string) string {
	dir := ""
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, workerenv.FlightDir+"="); ok {
			dir = v // the last one counts, as for exec
		}
	}
	return dir
}

// flightDir is where attempt's workers write their flight records: under
// the user's $XLADDP_FLIGHT_DIR if environ sets it (kept), else a fresh
// temporary directory (owned: removed unless it explains a failure).
func flightDir(environ []string, attempt int) (dir string, owned bool, err error) {
	if user := userFlightDir(environ); user != "" {
		dir = filepath.Join(user, fmt.Sprintf("attempt_%d", attempt))
		return dir, false, os.MkdirAll(dir, 0o755)
	}
	dir, err = os.MkdirTemp("", "ddprun-flight-")
	return dir, true, err
}

// collectFlight asks the workers still running to write their flight
// records (SIGUSR1, after SIGCONT for a stopped one), waits until each has written one or exited (at most
// flightWait), and returns the diagnosis of what they wrote, or "" when
// none did (a program without a process group). It covers this node's
// ranks.
func (set *workerSet) collectFlight(dir string) string {
	ranks := make([]int, len(set.workers))
	for i, w := range set.workers {
		ranks[i] = w.rank
		if !w.exited() {
			// A stopped worker (SIGSTOP, ^Z) writes once continued: the
			// job is ending anyway, and its record says where it stood.
			_ = w.cmd.Process.Signal(syscall.SIGCONT)
			_ = w.cmd.Process.Signal(syscall.SIGUSR1)
		}
	}
	for deadline := time.Now().Add(flightWait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if set.allDumpedOrExited(dir) {
			break
		}
	}
	dumps, err := flight.Read(dir)
	if err != nil {
		return fmt.Sprintf("the flight records in %s are unreadable: %v", dir, err)
	}
	if len(dumps) == 0 {
		return ""
	}
	return flight.Diagnose(dumps, ranks)
}

// allDumpedOrExited reports whether every worker wrote a flight record
// into dir or is gone.
func (set *workerSet) allDumpedOrExited(dir string) bool {
	for _, w := range set.workers {
		if w.exited() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("flight-rank%d.json", w.rank))); err != nil {
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
	if err != nil {
		return fmt.Sprintf("the flight records in %s are unreadable: %v", dir, err)
	}
	if len(dumps) == 0 {
		return ""
	}
	return flight.Diagnose(dumps, flight.Ranks(world))
}
