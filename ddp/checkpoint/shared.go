package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/exchange"
	"github.com/xladdp/xladdp/internal/atomicfile"
	"github.com/xladdp/xladdp/xla"
)

// sharedCheck is the file rank 0 writes for SeenByEveryRank.
const sharedCheck = ".xladdp-shared-check"

// SeenByEveryRank reports whether every rank of the job sees the one
// directory this checkpointer writes into: rank 0 writes a token there,
// and every rank reads it back. A directory of each node's own works
// until a node is lost (the survivors then commit where the others
// cannot read), so a program says so as it starts. Every replica calls
// it at the same point.
func (ck *Checkpointer) SeenByEveryRank(ctx context.Context, dev *xla.Device) (bool, error) {
	g := dist.Current()
	if g.WorldSize() == 1 {
		return true, nil
	}
	return exchange.HostOnce(ctx, dev, exchange.Timeout(g), "checking that every rank sees "+ck.opts.Dir, func() (bool, error) {
		path := filepath.Join(ck.opts.Dir, sharedCheck)
		token := make([]byte, 16)
		if g.Rank() == 0 {
			_, _ = rand.Read(token)
			if err := atomicfile.Write(path, []byte(hex.EncodeToString(token))); err != nil {
				return false, fmt.Errorf("checkpoint: %w", err)
			}
		}
		if err := g.Broadcast(ctx, dist.ByteBuffer(dist.Int64, token), 0); err != nil {
			return false, fmt.Errorf("checkpoint: checking that every rank sees %s: %w", ck.opts.Dir, err)
		}
		seen := []int32{0}
		if b, err := readSmall(path, 64); err == nil && string(b) == hex.EncodeToString(token) {
			seen[0] = 1
		}
		if err := g.AllReduce(ctx, dist.Int32s(seen), dist.Min); err != nil {
			return false, fmt.Errorf("checkpoint: checking that every rank sees %s: %w", ck.opts.Dir, err)
		}
		if g.Rank() == 0 {
			_ = os.Remove(path)
		}
		return seen[0] == 1, nil
	})
}

// readSmall reads at most limit bytes of the regular file path.
func readSmall(path string, limit int) ([]byte, error) {
	info, err := os.Lstat(path)
	if err != nil || !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, limit)
	n, _ := f.Read(buf)
	return buf[:n], nil
}
