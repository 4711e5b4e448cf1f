package progshare

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/xladdp/xladdp/internal/procfs"
)

// claimant is the process that won a program's claim, as it records it
// beside the claim: a process waiting for the program names it, and on
// the claimant's own host sees whether it is stopped.
type claimant struct {
	Rank int    `json:"rank"`
	PID  int    `json:"pid"`
	Host string `json:"host"`
	// Start is the process's start time (/proc): with PID it names one
	// process, where a pid alone may have been reused.
	Start uint64 `json:"start"`
}

// maxClaimant bounds a claimant record as read from the store.
const maxClaimant = 1 << 10

// thisProcess is the claimant record of this process, rank.
func thisProcess(rank int) claimant {
	host, _ := os.Hostname()
	start, _ := procfs.StartTime("/proc", os.Getpid())
	return claimant{Rank: rank, PID: os.Getpid(), Host: host, Start: start}
}

// claimantOf reads who claimed program name; ok false when no record is
// there (or it is not one), never waiting for one.
func (x *Exchange) claimantOf(ctx context.Context, name string) (c claimant, ok bool) {
	found, err := x.st.Check(ctx, programKey(name, "claimant"))
	if err != nil || !found[0] {
		return claimant{}, false
	}
	raw, err := x.st.Get(ctx, programKey(name, "claimant"))
	if err != nil || len(raw) > maxClaimant || json.Unmarshal(raw, &c) != nil {
		return claimant{}, false
	}
	return c, true
}

// describe names the claimant with what this host can see of it, "rank
// 1 (pid 42 on node-a; stopped)", and reports whether it is stopped: a
// process that runs again only once continued.
func (c claimant) describe() (who string, stopped bool) {
	who = fmt.Sprintf("rank %d (pid %d on %s", c.Rank, c.PID, c.Host)
	if host, _ := os.Hostname(); host != c.Host {
		return who + ")", false
	}
	if start, ok := procfs.StartTime("/proc", c.PID); !ok || start != c.Start {
		return who + "; gone)", false
	}
	state := procfs.State("/proc", c.PID)
	if procfs.Stopped(state) {
		return fmt.Sprintf("%s; %s: kill -CONT %d resumes it)", who, state, c.PID), true
	}
	if state != "" {
		who += "; " + state
	}
	return who + ")", false
}
