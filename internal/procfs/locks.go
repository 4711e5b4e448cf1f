package procfs

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxLocksLines bounds how much of proc's locks table FlockHolder reads.
const maxLocksLines = 100000

// FlockHolder is the pid that holds an flock on the file at path, read
// from proc's locks table ("/proc/locks"), if any (ok false too when the
// table cannot be read).
func FlockHolder(proc, path string) (pid int, ok bool) {
	info, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	st, isUnix := info.Sys().(*syscall.Stat_t)
	if !isUnix {
		return 0, false
	}
	f, err := os.Open(filepath.Join(proc, "locks"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan() && n < maxLocksLines; n++ {
		// "1: FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF"; a waiter's
		// line has "->" after the number.
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" {
			continue
		}
		id := strings.Split(fields[5], ":")
		if len(id) != 3 {
			continue
		}
		major, err1 := strconv.ParseUint(id[0], 16, 32)
		minor, err2 := strconv.ParseUint(id[1], 16, 32)
		inode, err3 := strconv.ParseUint(id[2], 10, 64)
		holder, err4 := strconv.Atoi(fields[4])
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			continue
		}
		if inode == st.Ino && uint32(major) == unix.Major(st.Dev) && uint32(minor) == unix.Minor(st.Dev) {
			return holder, true
		}
	}
	return 0, false
}

// State is pid's scheduler state in a word: "running", "sleeping",
// "waiting on disk", "stopped" (SIGSTOP, Ctrl-Z), "stopped by a debugger",
// "zombie"; "" when unknown.
func State(proc string, pid int) string {
	fields := statFields(proc, pid)
	if len(fields) == 0 {
		return ""
	}
	switch fields[0] {
	case "R":
		return "running"
	case "S", "I":
		return "sleeping"
	case "D":
		return "waiting on disk"
	case "T":
		return "stopped"
	case "t":
		return "stopped by a debugger"
	case "Z", "X":
		return "zombie"
	}
	return ""
}

// statFields are the fields of pid's stat after its command name, the
// state first; nil when unknown.
func statFields(proc string, pid int) []string {
	raw, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	// "PID (COMM) S ...": COMM may hold spaces and parentheses.
	return strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
}

// StartTime is when pid started, in clock ticks since boot: with the pid
// it names one process, where a pid alone may have been reused.
func StartTime(proc string, pid int) (ticks uint64, ok bool) {
	const startTimeField = 22 - 3 // stat's 22nd field; the fields start at the 3rd
	fields := statFields(proc, pid)
	if len(fields) <= startTimeField {
		return 0, false
	}
	ticks, err := strconv.ParseUint(fields[startTimeField], 10, 64)
	return ticks, err == nil
}

// CPUTicks is the CPU time pid has used (user and system), in clock
// ticks: a holder whose count moves is working.
func CPUTicks(proc string, pid int) (ticks uint64, ok bool) {
	const utime, stime = 14 - 3, 15 - 3 // stat's 14th and 15th fields
	fields := statFields(proc, pid)
	if len(fields) <= stime {
		return 0, false
	}
	u, uerr := strconv.ParseUint(fields[utime], 10, 64)
	s, serr := strconv.ParseUint(fields[stime], 10, 64)
	return u + s, uerr == nil && serr == nil
}

// Stopped reports whether a State is a stop (SIGSTOP, ^Z, a debugger):
// such a process runs again only once continued.
func Stopped(state string) bool { return state == "stopped" || state == "stopped by a debugger" }

// Catches reports whether pid has a handler for sig (SigCgt in its
// status): sending a signal its default action ends the process with
// (SIGUSR1) to one that does not catch it kills it. False when unknown.
func Catches(proc string, pid int, sig syscall.Signal) bool {
	raw, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "status"))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(raw)) {
		if mask, ok := strings.CutPrefix(line, "SigCgt:"); ok {
			bits, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
			return err == nil && sig >= 1 && sig <= 64 && bits&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}
