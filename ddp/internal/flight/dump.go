package flight

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Dump is one rank's flight record as it writes it to disk.
type Dump struct {
	Rank      int     `json:"rank"`
	World     int     `json:"world"`
	Transport string  `json:"transport"`
	Reason    string  `json:"reason"` // why it dumped: the failure, or a signal
	Entries   []Entry `json:"entries"`
	// Busy is the work the rank declared it was doing outside the
	// collectives when it dumped (none: zero).
	Busy Busy `json:"busy,omitzero"`
}

// maxDumpBytes bounds a dump file read back (a full ring is ~0.5 MB).
const maxDumpBytes = 16 << 20

// DumpName is rank's file in a dump directory.
func DumpName(rank int) string { return "flight-rank" + strconv.Itoa(rank) + ".json" }

// Write stores d in dir as its rank's file, atomically (a reader never
// sees half of it), replacing an earlier dump of that rank.
func Write(dir string, d Dump) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("flight: dump directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".flight-*")
	if err != nil {
		return fmt.Errorf("flight: dump: %w", err)
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, DumpName(d.Rank)))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("flight: dump of rank %d: %w", d.Rank, err)
	}
	return nil
}

// Read loads every rank's dump in dir, ordered by rank; a file that is
// not a dump (truncated, too large, another format) is an error naming it.
func Read(dir string) ([]Dump, error) {
	names, err := filepath.Glob(filepath.Join(dir, "flight-rank*.json"))
	if err != nil {
		return nil, err
	}
	var out []Dump
	for _, name := range names {
		d, err := readOne(name)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out, nil
}

func readOne(name string) (Dump, error) {
	var d Dump
	info, err := os.Stat(name)
	if err != nil {
		return d, err
	}
	if info.Size() > maxDumpBytes {
		return d, fmt.Errorf("flight: %s is %d bytes, more than a dump holds (%d)", name, info.Size(), maxDumpBytes)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("flight: %s is not a flight dump: %w", name, err)
	}
	if want := DumpName(d.Rank); filepath.Base(name) != want {
		return d, fmt.Errorf("flight: %s holds rank %d's dump (its file is %s)", name, d.Rank, want)
	}
	return d, nil
}

// Missing lists the ranks of expected with no dump among dumps.
func Missing(dumps []Dump, expected []int) []int {
	have := map[int]bool{}
	for _, d := range dumps {
		have[d.Rank] = true
	}
	var out []int
	for _, r := range expected {
		if !have[r] {
			out = append(out, r)
		}
	}
	return out
}

// Last is d with only its last n collectives (what Diagnose reads of a
// rank), for sending a node's dumps to another.
func (d Dump) Last(n int) Dump {
	var kept []Entry
	for i := len(d.Entries) - 1; i >= 0 && len(kept) < n; i-- {
		if !d.Entries[i].P2P {
			kept = append(kept, d.Entries[i])
		}
	}
	slices.Reverse(kept)
	d.Entries = kept
	return d
}

// Ranks is 0, 1, ..., world-1: every rank of a job.
func Ranks(world int) []int {
	out := make([]int, world)
	for i := range out {
		out[i] = i
	}
	return out
}

// joinInts writes rs as "0,1,3".
func joinInts(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ",")
}
