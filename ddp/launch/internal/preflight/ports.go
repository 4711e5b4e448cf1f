package preflight

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Process is a process on this host.
type Process struct {
	PID     int
	Command string // its command line, or its name when that is unreadable
}

func (p Process) String() string { return fmt.Sprintf("pid %d (%s)", p.PID, p.Command) }

// maxSocketTable bounds how many lines of /proc/net/tcp{,6} are read.
const maxSocketTable = 1 << 20

// tcpListen is the state of a listening socket in /proc/net/tcp.
const tcpListen = "0A"

// PortHolder returns the process listening on TCP port (any address), if
// this host has one and it can be seen (another user's processes may not
// be): ok is whether a listener was found at all.
func PortHolder(proc string, port int) (holder Process, found, ok bool) {
	inodes := map[string]bool{}
	for _, table := range []string{"net/tcp", "net/tcp6"} {
		listening(filepath.Join(proc, table), port, inodes)
	}
	if len(inodes) == 0 {
		return Process{}, false, false
	}
	holder, found = socketOwner(proc, inodes)
	return holder, found, true
}

// listening adds to inodes the sockets of table that listen on port.
func listening(table string, port int, inodes map[string]bool) {
	f, err := os.Open(table)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan() && n < maxSocketTable; n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != tcpListen {
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if ok && err == nil && int(p) == port && fields[9] != "0" {
			inodes[fields[9]] = true
		}
	}
}

// socketOwner finds the process with one of inodes open.
func socketOwner(proc string, inodes map[string]bool) (Process, bool) {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return Process{}, false
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join(proc, e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil {
				continue
			}
			if inode, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
				return Process{PID: pid, Command: commandLine(proc, pid)}, true
			}
		}
	}
	return Process{}, false
}

// commandLine is pid's command line (arguments joined by spaces, at most
// 200 bytes), else its name.
func commandLine(proc string, pid int) string {
	raw, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cmdline"))
	cmd := strings.TrimSpace(strings.ReplaceAll(string(raw), "\x00", " "))
	if err != nil || cmd == "" {
		name, _ := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "comm"))
		cmd = strings.TrimSpace(string(name))
	}
	if len(cmd) > 200 {
		cmd = cmd[:200] + "…"
	}
	return cmd
}
