package exchange

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"time"

	"github.com/xladdp/xladdp/xla"

	"github.com/xladdp/xladdp/ddp/dist"
)

// Timeout is g's timeout.
func Timeout(g *dist.ProcessGroup) time.Duration { return g.Timeout() }

// MaxGatherBytes bounds what AllGatherBytes accepts from one rank, so a
// rank that sends a corrupt length cannot make the others allocate it.
const MaxGatherBytes = 64 << 20

// AllGatherBytes gathers a byte string of any length up to
// MaxGatherBytes from every rank.
func AllGatherBytes(ctx context.Context, g *dist.ProcessGroup, mine []byte) ([][]byte, error) {
	if len(mine) > MaxGatherBytes {
		return nil, fmt.Errorf("gathering %d bytes from rank %d: at most %d", len(mine), g.Rank(), MaxGatherBytes)
	}
	lengths := make([]int64, g.WorldSize())
	if err := g.AllGather(ctx, dist.Int64s(lengths), dist.Int64s([]int64{int64(len(mine))})); err != nil {
		return nil, err
	}
	longest := int64(0)
	for r, n := range lengths {
		if n < 0 || n > MaxGatherBytes {
			return nil, fmt.Errorf("rank %d announced %d bytes to gather: at most %d", r, n, MaxGatherBytes)
		}
		longest = max(longest, n)
	}
	words := int((longest + 7) / 8)
	padded := make([]int64, words)
	copy(dist.Int64s(padded).Bytes(), mine)
	all := make([]int64, words*g.WorldSize())
	if err := g.AllGather(ctx, dist.Int64s(all), dist.Int64s(padded)); err != nil {
		return nil, err
	}
	out := make([][]byte, g.WorldSize())
	for r := range out {
		out[r] = append([]byte(nil), dist.Int64s(all[r*words : (r+1)*words]).Bytes()[:lengths[r]]...)
	}
	return out, nil
}

// AgreeOnRankZero hands rank 0's outcome of what to every rank: a
// broadcast that also keeps the others waiting until rank 0 is done.
func AgreeOnRankZero(ctx context.Context, g *dist.ProcessGroup, err error, what string) error {
	if g.WorldSize() == 1 {
		return err
	}
	status := []int32{0}
	if err != nil {
		status[0] = 1
	}
	if bcastErr := g.Broadcast(ctx, dist.Int32s(status), 0); bcastErr != nil {
		return errors.Join(err, bcastErr)
	}
	if err != nil {
		return err
	}
	if status[0] != 0 {
		return fmt.Errorf("ddp: rank 0 failed %s (its log says why)", what)
	}
	return nil
}

// Mismatch is what ranks disagree on when their layouts differ, as
// ExplainMismatch says it: Summary the likely cause, Item what one line
// of the layout is.
type Mismatch struct{ Summary, Item string }

// CheckLayout compares a fingerprint of layout with every rank's and
// returns the sum of the ranks' localReplicas; what says what differs if
// the layouts do not match.
func CheckLayout(ctx context.Context, g *dist.ProcessGroup, layout string, localReplicas int, what Mismatch) (int, error) {
	sum := sha256.Sum256([]byte(layout))
	mine := []int64{int64(binary.LittleEndian.Uint64(sum[:8])), int64(localReplicas)}
	all := make([]int64, 2*g.WorldSize())
	if err := g.AllGather(ctx, dist.Int64s(all), dist.Int64s(mine)); err != nil {
		return 0, ExplainMismatch(ctx, g, err, layout, what)
	}
	replicas := 0
	same := true
	for r := range g.WorldSize() {
		replicas += int(all[2*r+1])
		same = same && all[2*r] == all[0]
	}
	if !same {
		return 0, ExplainMismatch(ctx, g, dist.ErrMismatch, layout, what)
	}
	return replicas, nil
}

// layoutWait bounds how long a failing rank waits for the others' layouts.
const layoutWait = 5 * time.Second

// ExplainMismatch turns a failure that may come from ranks with different
// layouts (one item per line) into an error naming the ranks and the
// first differing line, from every rank's layout.
func ExplainMismatch(ctx context.Context, g *dist.ProcessGroup, cause error, layout string, what Mismatch) error {
	if !errors.Is(cause, dist.ErrMismatch) {
		return cause
	}
	ctx, cancel := context.WithTimeout(ctx, layoutWait)
	defer cancel()
	layouts := layoutsOf(ctx, g, layout)
	mine := strings.Split(layout, "\n")
	for r, other := range layouts {
		if r == g.Rank() || other == nil {
			continue
		}
		theirs := strings.Split(*other, "\n")
		for i := 0; i < max(len(mine), len(theirs)); i++ {
			a, b := LineAt(mine, i), LineAt(theirs, i)
			if a != b {
				return fmt.Errorf("%w: %s: %s %d is %s on rank %d but %s on rank %d",
					dist.ErrMismatch, what.Summary, what.Item, i, a, g.Rank(), b, r)
			}
		}
	}
	return cause
}

// layoutsOf returns the layout of every rank it could learn (nil for the
// others): through the store, where every failing rank posts its own; or,
// on a group without one (the mpi backend), by gathering them from every
// rank, which works while the group is still usable (the layout check's
// failure leaves it so, and every rank takes this path then).
func layoutsOf(ctx context.Context, g *dist.ProcessGroup, layout string) []*string {
	out := make([]*string, g.WorldSize())
	if g.Store() == nil {
		all, err := AllGatherBytes(ctx, g, []byte(layout))
		if err != nil {
			return out
		}
		for r := range out {
			text := string(all[r])
			out[r] = &text
		}
		return out
	}
	if err := g.Store().Set(ctx, fmt.Sprintf("ddp/layout/%d", g.Rank()), []byte(layout)); err != nil {
		return out
	}
	for r := range g.WorldSize() {
		if r == g.Rank() {
			continue
		}
		if other, err := g.Store().Get(ctx, fmt.Sprintf("ddp/layout/%d", r)); err == nil {
			text := string(other)
			out[r] = &text
		}
	}
	return out
}

// LineAt is line i, or "absent" past the end or for an empty line.
func LineAt(lines []string, i int) string {
	if i < len(lines) && lines[i] != "" {
		return lines[i]
	}
	return "absent"
}

// HostDType maps a gradient's element type to the process group's.
func HostDType(d xla.DType) (dist.DType, bool) {
	switch d {
	case xla.Float32:
		return dist.Float32, true
	case xla.Float64:
		return dist.Float64, true
	case xla.BFloat16:
		return dist.BFloat16, true
	case xla.Int32:
		return dist.Int32, true
	case xla.Int64:
		return dist.Int64, true
	}
	return 0, false
}

// SameOnEveryRank checks that every rank read the same file (digest
// its SHA-256).
func SameOnEveryRank(ctx context.Context, g *dist.ProcessGroup, digest [32]byte, path string) error {
	if g.WorldSize() == 1 {
		return nil
	}
	mine := make([]int64, 4)
	for i := range mine {
		mine[i] = int64(binary.LittleEndian.Uint64(digest[8*i:]))
	}
	all := make([]int64, 4*g.WorldSize())
	if err := g.AllGather(ctx, dist.Int64s(all), dist.Int64s(mine)); err != nil {
		return err
	}
	for r := range g.WorldSize() {
		for i := range mine {
			if all[4*r+i] != all[i] {
				return fmt.Errorf("rank %d read a different %s than rank 0 (an older copy, or each node given a directory of its own? every rank must see the same file: give every node one shared directory)", r, path)
			}
		}
	}
	return nil
}
