package crossing

import (
	"context"
	"fmt"

	"github.com/xladdp/xladdp/ddp/dist"
)

// ShiftBytes sends send to rank to (a sharded optimizer's buddy copies) and receives into recv what rank from
// sends this rank, every rank calling it at the same point with to and
// from the same permutation (rank r's to is the rank whose from is r).
// Both lengths are multiples of 8, and what from sends must fill recv
// exactly: a rank that announces another length is refused before
// anything moves. Nothing is copied on the way.
func ShiftBytes(ctx context.Context, g *dist.ProcessGroup, send, recv []byte, to, from int) error {
	size := g.WorldSize()
	switch {
	case to < 0 || to >= size || from < 0 || from >= size:
		return fmt.Errorf("shifting bytes on rank %d: to rank %d, from rank %d, of %d ranks", g.Rank(), to, from, size)
	case len(send)%8 != 0 || len(recv)%8 != 0:
		return fmt.Errorf("shifting bytes on rank %d: %d and %d bytes, not whole words", g.Rank(), len(send), len(recv))
	}
	lengths := make([]int64, size)
	if err := g.AllGather(ctx, dist.Int64s(lengths), dist.Int64s([]int64{int64(len(send))})); err != nil {
		return err
	}
	if n := lengths[from]; n != int64(len(recv)) {
		return fmt.Errorf("rank %d announced %d bytes for rank %d, which holds %d for it", from, n, g.Rank(), len(recv))
	}
	inSplits, outSplits := make([]int, size), make([]int, size)
	inSplits[to], outSplits[from] = len(send)/8, len(recv)/8
	return g.AllToAllSingle(ctx, dist.ByteBuffer(dist.Int64, recv), dist.ByteBuffer(dist.Int64, send), outSplits, inSplits)
}
