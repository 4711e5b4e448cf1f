package tcp

import (
	"time"

	"github.com/xladdp/xladdp/ddp/internal/transport"
)

const (
	// pieceBytes is the unit a ring step is pipelined in: received, reduced
	// and forwarded piece by piece.
	pieceBytes = 1 << 20
	// directAllReduceBytes: below this many bytes per rank, all-reduce sends
	// every buffer to every rank in one round instead of 2(n-1) ring steps.
	directAllReduceBytes = 64 << 10
)

// tag identifies a frame of collective seq: its ring step and piece.
func tag(seq uint64, step, piece int) uint64 {
	return seq<<32 | uint64(step)<<20 | uint64(piece)
}

func mod(a, n int) int { return ((a % n) + n) % n }

// bounds returns the element ranges [b[i], b[i+1]) of n near-equal chunks.
func bounds(length, n int) []int {
	b := make([]int, n+1)
	for i := range b {
		b[i] = i * length / n
	}
	return b
}

// waitAll waits for queued sends; a failure is attributed to their peer.
func waitAll(jobs []sentJob) error {
	for _, j := range jobs {
		if err := <-j.job.done; err != nil {
			return peerError(j.rank, err)
		}
	}
	return nil
}

type sentJob struct {
	rank int
	job  *sendJob
}

// allReduce sums (or combines by op) buf across ranks in place; Avg is
// reduced as a sum, which the group divides.
func (g *group) allReduce(seq uint64, buf Buffer, op ReduceOp, deadline time.Time) error {
	if g.size == 1 || buf.Len() == 0 {
		return nil
	}
	if len(buf.Bytes()) <= directAllReduceBytes || buf.Len() < g.size {
		return g.directAllReduce(seq, buf, op, deadline)
	}
	if g.shm != nil && len(buf.Bytes()) >= shmMinBytes {
		return g.shmAllReduce(seq, buf, op, deadline)
	}
	b := bounds(buf.Len(), g.size)
	if err := g.foldReduceScatter(seq, buf, b, buf.Slice(b[g.rank], b[g.rank+1]), true, op, deadline); err != nil {
		return err
	}
	return g.ringAllGather(seq, buf, b, g.rank, 1, deadline)
}

// directAllReduce sends buf to every rank and folds all contributions in
// rank order, so every rank computes the identical result.
func (g *group) directAllReduce(seq uint64, buf Buffer, op ReduceOp, deadline time.Time) error {
	parts, err := g.exchange(kindCollective, seq, 0, buf.Bytes(), deadline)
	if err != nil {
		return err
	}
	parts[g.rank] = append([]byte(nil), buf.Bytes()...)
	copy(buf.Bytes(), parts[0])
	for r := 1; r < g.size; r++ {
		transport.ReduceInto(buf, transport.ByteBuffer(buf.DType, parts[r]), op)
	}
	return nil
}

// pieces splits chunk [lo, hi) of buf into pipelining units.
func pieces(buf Buffer, lo, hi int) []Buffer {
	per := max(1, pieceBytes/buf.DType.Size())
	var out []Buffer
	for i := lo; i < hi; i += per {
		out = append(out, buf.Slice(i, min(i+per, hi)))
	}
	return out
}

// ringAllGather runs n-1 all-gather steps over chunks b starting from the
// chunk this rank owns: at step s it sends chunk owned-s right and receives
// chunk owned-s-1 from the left straight into buf. Steps are numbered from
// stepBase so frames cannot be confused with a preceding reduce-scatter's.
func (g *group) ringAllGather(seq uint64, buf Buffer, b []int, owned, stepBase int, deadline time.Time) error {
	n, r := g.size, g.rank
	leftRank, rightRank := mod(r-1, n), mod(r+1, n)
	left, right := g.peers[leftRank], g.peers[rightRank]
	var sent []sentJob
	for i, piece := range pieces(buf, b[owned], b[owned+1]) {
		sent = append(sent, sentJob{rightRank, right.send(kindCollective, tag(seq, stepBase, i), g.opDesc, piece.Bytes(), deadline)})
	}
	for s := 0; s < n-1; s++ {
		c := mod(owned-s-1, n)
		for i, piece := range pieces(buf, b[c], b[c+1]) {
			if err := left.recv(kindCollective, tag(seq, stepBase+s, i), g.opDesc, piece.Bytes(), deadline); err != nil {
				return peerError(leftRank, err)
			}
			if s < n-2 {
				sent = append(sent, sentJob{rightRank, right.send(kindCollective, tag(seq, stepBase+s+1, i), g.opDesc, piece.Bytes(), deadline)})
			}
		}
	}
	return waitAll(sent)
}

// allGather concatenates every rank's in into out in rank order.
func (g *group) allGather(seq uint64, out, in Buffer, deadline time.Time) error {
	n := in.Len()
	copy(out.Slice(g.rank*n, (g.rank+1)*n).Bytes(), in.Bytes())
	if g.size == 1 || n == 0 {
		return nil
	}
	b := make([]int, g.size+1)
	for i := range b {
		b[i] = i * n
	}
	return g.ringAllGather(seq, out, b, g.rank, 0, deadline)
}

// reduceScatter gives this rank its block of in reduced across ranks,
// leaving in unchanged, folded in rank order as every all-reduce is, so
// that a sharded optimizer's reduce-scatter and the plain wrapper's
// all-reduce sum alike.
func (g *group) reduceScatter(seq uint64, out, in Buffer, op ReduceOp, deadline time.Time) error {
	n := out.Len()
	switch {
	case g.size == 1 || n == 0:
		copy(out.Bytes(), in.Bytes())
		return nil
	case g.shm != nil:
		return g.shmReduceScatter(seq, out, in, op, deadline)
	}
	b := make([]int, g.size+1)
	for i := range b {
		b[i] = i * n
	}
	return g.foldReduceScatter(seq, in, b, out, false, op, deadline)
}

// foldReduceScatter sends chunk q of in (elements [b[q], b[q+1])) to each
// rank q and sets out to this rank's chunk reduced over the ranks in rank
// order, ((v0 op v1) op v2) ..., piece by piece as the pieces arrive. It
// moves what a ring reduce-scatter moves, each chunk once to each rank.
// inPlace says out is this rank's chunk of in.
func (g *group) foldReduceScatter(seq uint64, in Buffer, b []int, out Buffer, inPlace bool, op ReduceOp, deadline time.Time) error {
	r := g.rank
	var sent []sentJob
	for q, p := range g.peers {
		if p == nil {
			continue
		}
		for i, piece := range pieces(in, b[q], b[q+1]) {
			sent = append(sent, sentJob{q, p.send(kindCollective, tag(seq, 0, i), g.opDesc, piece.Bytes(), deadline)})
		}
	}
	bufBytes := min(pieceBytes, len(out.Bytes()))
	scratch := make([]byte, bufBytes)
	var saved []byte // this rank's own piece, before out (in place) takes rank 0's
	if inPlace && r != 0 {
		saved = make([]byte, bufBytes)
	}
	recv := func(q, i int, into []byte) error {
		if err := g.peers[q].recv(kindCollective, tag(seq, 0, i), g.opDesc, into, deadline); err != nil {
			return peerError(q, err)
		}
		return nil
	}
	owns := pieces(in, b[r], b[r+1]) // out's pieces, of the same dtype
	for i, acc := range pieces(out, 0, out.Len()) {
		own := owns[i]
		switch {
		case r == 0 && !inPlace:
			copy(acc.Bytes(), own.Bytes())
		case r != 0:
			if inPlace {
				own = transport.ByteBuffer(in.DType, saved[:copy(saved, own.Bytes())])
			}
			if err := recv(0, i, acc.Bytes()); err != nil {
				return err
			}
		}
		for q := 1; q < g.size; q++ {
			from := own
			if q != r {
				from = transport.ByteBuffer(in.DType, scratch[:len(acc.Bytes())])
				if err := recv(q, i, from.Bytes()); err != nil {
					return err
				}
			}
			transport.ReduceInto(acc, from, op)
		}
	}
	// An all-reduce's all-gather overwrites chunks these sends read from.
	return waitAll(sent)
}

// exchange sends msg to every peer and returns what each sent (nil for
// this rank): a barrier that also carries data of one size on every rank.
func (g *group) exchange(kind uint32, seq uint64, step int, msg []byte, deadline time.Time) ([][]byte, error) {
	desc := g.opDesc
	if kind == kindDebug {
		desc = 0 // the debug check compares the full descriptions itself
	}
	var sent []sentJob
	for r, p := range g.peers {
		if p != nil {
			sent = append(sent, sentJob{r, p.send(kind, tag(seq, step, 0), desc, msg, deadline)})
		}
	}
	got := make([][]byte, g.size)
	for r, p := range g.peers {
		if p == nil {
			continue
		}
		got[r] = make([]byte, len(msg))
		if err := p.recv(kind, tag(seq, step, 0), desc, got[r], deadline); err != nil {
			return nil, peerError(r, err)
		}
	}
	return got, waitAll(sent)
}
