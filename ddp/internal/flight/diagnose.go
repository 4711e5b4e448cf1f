package flight

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// position is where one rank stands in the job's collectives.
type position struct {
	rank int
	// last is the last collective it issued; ok false when it issued none.
	last Entry
	ok   bool
	// done is the highest collective it finished.
	done uint64
	// panicked is the panic its dump records, or "".
	panicked string
}

// maxPanicText bounds the panic a diagnosis quotes.
const maxPanicText = 200

// Diagnose compares the dumps of the ranks expected (a job's, or one
// node's) and says, in one
// message, who is behind and where each rank is: "rank 2 finished
// AllReduce #182 but never joined #183; its last call was train.go:57;
// ranks 0,1,3 wait in AllReduce #183 at train.go:61". Ranks that left no
// dump are named; ranks that issued different operations under one
// number are named with both calls.
func Diagnose(dumps []Dump, expected []int) string {
	var lines []string
	if missing := Missing(dumps, expected); len(missing) > 0 {
		lines = append(lines, fmt.Sprintf("%s left no flight dump (killed, stopped, or never started)", ranksPhrase(missing)))
	}
	if len(dumps) == 0 {
		return strings.Join(lines, "; ")
	}
	pos := positions(dumps)
	if m := mismatch(dumps); m != "" {
		lines = append(lines, m)
	}
	front := frontOf(pos)
	var behind, waiting []position
	for _, p := range pos {
		if !p.ok || p.last.Seq < front {
			behind = append(behind, p)
		} else if p.last.State != Done {
			waiting = append(waiting, p)
		}
	}
	for _, p := range behind {
		if !p.ok {
			lines = append(lines, fmt.Sprintf("rank %d never joined collective #1", p.rank))
			continue
		}
		line := fmt.Sprintf("rank %d %s %s #%d but never joined #%d; its last call was %s",
			p.rank, verb(p.last.State), p.last.Name, p.last.Seq, p.last.Seq+1, short(p.last.Caller))
		if p.panicked != "" {
			line += fmt.Sprintf(" (then it panicked: %q)", p.panicked)
		}
		lines = append(lines, line)
	}
	lines = append(lines, waitLines(waiting)...)
	if len(lines) == 0 {
		name, _, _ := Front(dumps)
		return fmt.Sprintf("%s finished %s #%d and %s in no collective", ranksPhrase(ranksOf(pos)), name, front, plural(len(pos), "is", "are"))
	}
	return strings.Join(lines, "; ")
}

// Behind lists the ranks of dumps that stopped before the others' last
// collective, or issued none.
func Behind(dumps []Dump) []int {
	pos := positions(dumps)
	front := frontOf(pos)
	var out []int
	for _, p := range pos {
		if !p.ok || p.last.Seq < front {
			out = append(out, p.rank)
		}
	}
	return out
}

// frontOf is the furthest collective any rank issued.
func frontOf(pos []position) uint64 {
	front := uint64(0)
	for _, p := range pos {
		if p.ok && p.last.Seq > front {
			front = p.last.Seq
		}
	}
	return front
}

// positions is each dump's rank's position among the collectives.
func positions(dumps []Dump) []position {
	out := make([]position, len(dumps))
	for i, d := range dumps {
		out[i].rank = d.Rank
		if p, ok := strings.CutPrefix(d.Reason, "panic: "); ok {
			if len(p) > maxPanicText {
				p = p[:maxPanicText] + "…"
			}
			out[i].panicked = p
		}
		for _, e := range d.Entries {
			if e.P2P {
				continue
			}
			if !out[i].ok || e.Seq > out[i].last.Seq {
				out[i].last, out[i].ok = e, true
			}
			if e.State == Done && e.Seq > out[i].done {
				out[i].done = e.Seq
			}
		}
	}
	return out
}

// waitLines groups the ranks still in a collective by what and where.
func waitLines(waiting []position) []string {
	groups := map[string][]int{}
	var keys []string
	for _, p := range waiting {
		k := fmt.Sprintf("%s #%d at %s", p.last.Name, p.last.Seq, short(p.last.Caller))
		if p.last.State == Failed {
			k = "failed in " + k
		}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], p.rank)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		rs := groups[k]
		switch {
		case strings.HasPrefix(k, "failed"):
			out[i] = ranksPhrase(rs) + " " + k
		case len(rs) == 1:
			out[i] = ranksPhrase(rs) + " waits in " + k
		default:
			out[i] = ranksPhrase(rs) + " wait in " + k
		}
	}
	return out
}

// mismatch names ranks that issued different operations as one number.
func mismatch(dumps []Dump) string {
	type call struct {
		what  string
		ranks []int
	}
	bySeq := map[uint64][]call{}
	for _, d := range dumps {
		for _, e := range d.Entries {
			if e.P2P {
				continue
			}
			what := fmt.Sprintf("%s %s[%d] at %s", e.Name, e.DType, e.Count, short(e.Caller))
			if countsMayDiffer(e.Name) {
				what = fmt.Sprintf("%s %s at %s", e.Name, e.DType, short(e.Caller))
			}
			calls := bySeq[e.Seq]
			found := false
			for i := range calls {
				if calls[i].what == what {
					calls[i].ranks, found = append(calls[i].ranks, d.Rank), true
				}
			}
			if !found {
				calls = append(calls, call{what, []int{d.Rank}})
			}
			bySeq[e.Seq] = calls
		}
	}
	var seqs []uint64
	for s, calls := range bySeq {
		if len(calls) > 1 {
			seqs = append(seqs, s)
		}
	}
	if len(seqs) == 0 {
		return ""
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	calls := bySeq[seqs[0]]
	parts := make([]string, len(calls))
	for i, c := range calls {
		parts[i] = fmt.Sprintf("%s called %s", ranksPhrase(c.ranks), c.what)
	}
	return fmt.Sprintf("collective #%d differs between ranks: %s", seqs[0], strings.Join(parts, "; "))
}

// countsMayDiffer tells the collectives whose ranks may each give
// another count: an all-to-all with splits (the deterministic sum's
// exchange sends each rank its own rows).
func countsMayDiffer(op string) bool { return op == "AllToAllSingle" }

// verb is what a rank behind did with its last collective.
func verb(s State) string {
	switch s {
	case Done:
		return "finished"
	case Failed:
		return "failed in"
	}
	return "waits in"
}

// ranksOf are the ranks of pos.
func ranksOf(pos []position) []int {
	out := make([]int, len(pos))
	for i, p := range pos {
		out[i] = p.rank
	}
	return out
}

// plural is one or many as n asks.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ranksPhrase is "rank 2" or "ranks 0,1,3".
func ranksPhrase(rs []int) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	return "ranks " + joinInts(rs)
}

// short is a caller's file:line without its directory.
func short(caller string) string {
	if caller == "" {
		return "an unknown line"
	}
	return filepath.Base(caller)
}

// Completed is how far the ranks of dumps got: the sum over them of the
// last collective each completed, which grows while any rank makes
// progress.
func Completed(dumps []Dump) uint64 {
	var sum uint64
	for _, p := range positions(dumps) {
		sum += p.done
	}
	return sum
}

// LastEnded is when the latest operation of dumps ended (zero when none
// has).
func LastEnded(dumps []Dump) time.Time {
	var last time.Time
	for _, d := range dumps {
		for _, e := range d.Entries {
			if e.Ended.After(last) {
				last = e.Ended
			}
		}
	}
	return last
}

// WaitingIn reports whether a rank of dumps is in collective seq and has
// not finished it.
func WaitingIn(dumps []Dump, seq uint64) bool {
	for _, p := range positions(dumps) {
		if p.ok && p.last.Seq == seq && p.last.State != Done {
			return true
		}
	}
	return false
}

// Front is the furthest collective any rank of dumps issued: its op and
// number (ok false when none issued one).
func Front(dumps []Dump) (name string, seq uint64, ok bool) {
	pos := positions(dumps)
	seq = frontOf(pos)
	for _, p := range pos {
		if p.ok && p.last.Seq == seq {
			return p.last.Name, seq, true
		}
	}
	return "", 0, false
}
