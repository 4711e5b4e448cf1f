package preflight

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/xladdp/xladdp/internal/procfs"
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
	held := procfs.Holders(proc, func(target string) bool {
		inode, ok := strings.CutPrefix(target, "socket:[")
		return ok && inodes[strings.TrimSuffix(inode, "]")]
	})
	for _, pids := range held {
		return Process{PID: pids[0], Command: procfs.CommandLine(proc, pids[0])}, true
	}
	return Process{}, false
}
