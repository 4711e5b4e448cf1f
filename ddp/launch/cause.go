package launch

import (
	"slices"
	"time"

	"github.com/xladdp/xladdp/ddp/internal/flight"
	"github.com/xladdp/xladdp/ddp/internal/procset"
	"github.com/xladdp/xladdp/ddp/internal/transport"
)

const (
	// causeWindow is how long, after a worker fails, the agent gathers
	// the other failures that may have been its cause or its consequence.
	causeWindow = 200 * time.Millisecond
	// blamedWait is how much longer it waits for a worker of this node
	// that a failed worker saw close its connection: that one died
	// first, and on a loaded node its exit may be reaped well after the
	// exit of the worker that noticed.
	blamedWait = 5 * time.Second
)

// rootCause picks, among first and the failures that follow, the one
// that most likely started it (see pickRoot). It gathers failures for
// causeWindow, and up to blamedWait for a worker of this node that
// another one saw close its connection; reaped are the ranks whose exit
// was received already, first's included.
func rootCause(set workerSet, node int, first *exit, remaining int, reaped []int) (root *exit, failures []*exit, left int) {
	failures = []*exit{first}
	start := time.Now()
	for remaining > 0 {
		wait := causeWindow
		if awaitsBlamed(set, failures, reaped) {
			wait = blamedWait
		}
		left := time.Until(start.Add(wait))
		if left <= 0 {
			break
		}
		select {
		case wk := <-set.Exits:
			remaining--
			reaped = append(reaped, wk.Rank)
			if e := describe(wk, node); e != nil {
				failures = append(failures, e)
			}
			continue
		case <-time.After(left):
		}
		break
	}
	return pickRoot(failures), failures, remaining
}

// awaitsBlamed tells whether a failure names a worker of this node, not
// yet reaped, whose connection it saw close.
func awaitsBlamed(set workerSet, failures []*exit, reaped []int) bool {
	for _, f := range failures {
		for _, rank := range transport.ClosedPeers(f.tail) {
			if !slices.Contains(reaped, rank) && slices.ContainsFunc(set.Processes, func(p *procset.Process) bool { return p.Rank == rank }) {
				return true
			}
		}
	}
	return false
}

// pickRoot is the failure that most likely started the others: a worker
// killed by a signal before one that exited on its own (which usually
// saw a peer die), then a worker whose connection another saw close,
// else the first seen.
func pickRoot(failures []*exit) *exit {
	for _, f := range failures {
		if f.signal != "" {
			return f
		}
	}
	var blamed []int
	for _, f := range failures {
		blamed = append(blamed, transport.ClosedPeers(f.tail)...)
	}
	for _, f := range failures {
		if slices.Contains(blamed, f.rank) && !slices.Contains(transport.ClosedPeers(f.tail), f.rank) {
			return f
		}
	}
	return failures[0]
}

// preferBehind replaces a root cause that exited on its own by another
// failed worker the flight records show behind the others (it left the
// collectives they then failed in): which of the two exits is seen first
// is a race.
func preferBehind(root *exit, failures []*exit, dumps []flight.Dump) *exit {
	if root.signal != "" || len(dumps) == 0 {
		return root
	}
	behind := flight.Behind(dumps)
	if slices.Contains(behind, root.rank) {
		return root
	}
	for _, f := range failures {
		if slices.Contains(behind, f.rank) {
			return f
		}
	}
	return root
}
