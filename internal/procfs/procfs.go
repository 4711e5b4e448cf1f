package procfs

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// maxCommandLine bounds a command line as CommandLine returns it.
const maxCommandLine = 200

// Holders maps each open file whose link target (/proc/PID/fd/N: a
// path, or "socket:[INODE]") match accepts to the pids holding it, read
// from proc (normally "/proc"); processes it may not read are skipped.
func Holders(proc string, match func(target string) bool) map[string][]int {
	out := map[string][]int{}
	entries, _ := os.ReadDir(proc)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join(proc, e.Name(), "fd")
		fds, _ := os.ReadDir(fdDir)
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil || !match(target) {
				continue
			}
			if !slices.Contains(out[target], pid) {
				out[target] = append(out[target], pid)
			}
		}
	}
	return out
}

// CommandLine is pid's command line (arguments joined by spaces, at most
// 200 bytes), else its name, else "command unknown".
func CommandLine(proc string, pid int) string {
	raw, _ := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cmdline"))
	// Arguments may hold newlines and escapes (python3 -c SCRIPT): one
	// line of plain text, so a command line cannot forge lines of ours.
	cmd := strings.TrimSpace(strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, string(raw)))
	if cmd == "" {
		name, _ := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "comm"))
		cmd = strings.TrimSpace(string(name))
	}
	if cmd == "" {
		return "command unknown"
	}
	if len(cmd) > maxCommandLine {
		cmd = cmd[:maxCommandLine] + "…"
	}
	return cmd
}

// Children are pid's child processes, read from proc (normally "/proc")
// through each of its threads' children lists; none when pid is gone.
func Children(proc string, pid int) []int {
	var pids []int
	tasks, _ := filepath.Glob(filepath.Join(proc, strconv.Itoa(pid), "task", "*", "children"))
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(b)) {
			if child, err := strconv.Atoi(f); err == nil {
				pids = append(pids, child)
			}
		}
	}
	return pids
}

// CreateMode is the mode a new file gets from os.Create in this process
// (0666 less the umask, read from proc's status): what a file written
// through a temporary one and renamed into place should end with, since
// os.CreateTemp makes it 0600. 0644 when the umask cannot be read.
func CreateMode(proc string) os.FileMode {
	b, err := os.ReadFile(filepath.Join(proc, "self", "status"))
	if err != nil {
		return 0o644
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			if mask, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return 0o666 &^ os.FileMode(mask)
			}
		}
	}
	return 0o644
}
