package preflight

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// Finding is one thing that would stop the job, and what to do about it.
type Finding struct {
	Check   string // "port", "master_addr", "memlock", ...
	Problem string
	Fix     string
}

func (f Finding) String() string {
	if f.Fix == "" {
		return f.Problem
	}
	return f.Problem + ": " + f.Fix
}

// PortFree checks that TCP port can be listened on here; when another
// process holds it, the finding names that process (from proc, normally
// "/proc"). what says whose port it is ("--master_port=29500"); fix says
// what to do.
func PortFree(proc string, port int, what, fix string) *Finding {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err == nil {
		ln.Close()
		return nil
	}
	problem := fmt.Sprintf("%s: port %d cannot be listened on (%v)", what, port, err)
	if errors.Is(err, syscall.EADDRINUSE) {
		problem = fmt.Sprintf("%s: port %d is taken by another process", what, port)
		if holder, found, _ := PortHolder(proc, port); found {
			problem = fmt.Sprintf("%s: port %d is taken by %s", what, port, holder)
		}
	}
	return &Finding{Check: "port", Problem: problem, Fix: fix}
}
