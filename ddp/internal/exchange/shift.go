package exchange

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/ddp/dist"
)

// ShiftBytes sends mine to rank to and returns what rank from sent this
// rank, every rank calling it at the same point with to and from the
// same permutation (rank r's to is the rank whose from is r). What from
// announces is bounded by limit before anything is allocated for it.
func ShiftBytes(ctx context.Context, g *dist.ProcessGroup, mine []byte, to, from int, limit int64) ([]byte, error) {
	size := g.WorldSize()
	if to < 0 || to >= size || from < 0 || from >= size {
		return nil, fmt.Errorf("shifting bytes on rank %d: to rank %d, from rank %d, of %d ranks", g.Rank(), to, from, size)
	}
	lengths := make([]int64, size)
	if err := g.AllGather(ctx, dist.Int64s(lengths), dist.Int64s([]int64{int64(len(mine))})); err != nil {
		return nil, err
	}
	if n := lengths[from]; n < 0 || n > limit {
		return nil, fmt.Errorf("rank %d announced %d bytes for rank %d: at most %d", from, n, g.Rank(), limit)
	}
	words := func(n int64) int { return int((n + 7) / 8) }
	in := make([]int64, words(int64(len(mine))))
	copy(dist.Int64s(in).Bytes(), mine)
	out := make([]int64, words(lengths[from]))
	inSplits, outSplits := make([]int, size), make([]int, size)
	inSplits[to], outSplits[from] = len(in), len(out)
	if err := g.AllToAllSingle(ctx, dist.Int64s(out), dist.Int64s(in), outSplits, inSplits); err != nil {
		return nil, err
	}
	return dist.Int64s(out).Bytes()[:lengths[from]], nil
}
