package dist

import (
	"context"
	"fmt"
	"time"
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

// AllReduce combines buf across all ranks with op, in place. A small
// buffer on a same-host group runs on the caller's goroutine when nothing
// else is queued (shm_fast.go).
func (g *ProcessGroup) AllReduce(ctx context.Context, buf Buffer, op ReduceOp) error {
	if g.engine != nil {
		if err := firstError(checkBuffer("AllReduce", buf), checkOp("AllReduce", op)); err != nil {
			return err
		}
		return g.engineRun(ctx, "AllReduce", engineCall{kind: opAllReduce, buf: buf, op: op}, g.avgOf(buf, op))
	}
	if g.smallPath(buf) && !g.debug && checkBuffer("AllReduce", buf) == nil && checkOp("AllReduce", op) == nil {
		if ran, err := g.runInline(ctx, "AllReduce", func(seq uint64, deadline time.Time) error {
			return g.smallAllReduce(ctx, seq, buf, op, deadline)
		}); ran {
			return err
		}
	}
	return g.AllReduceAsync(buf, op).Wait(ctx)
}

// smallPath reports whether an all-reduce of buf takes the same-host fast path.
func (g *ProcessGroup) smallPath(buf Buffer) bool {
	return g.shm != nil && g.size > 1 && len(buf.bytes) > 0 && len(buf.bytes) <= shmRegionBytes
}

// AllReduceAsync is AllReduce without waiting; buf must not be touched
// until the Work is done.
func (g *ProcessGroup) AllReduceAsync(buf Buffer, op ReduceOp) *Work {
	if err := firstError(checkBuffer("AllReduce", buf), checkOp("AllReduce", op)); err != nil {
		return finished("AllReduce", err)
	}
	if g.engine != nil {
		return g.engineOp(nil, "AllReduce", engineCall{kind: opAllReduce, buf: buf, op: op}, g.avgOf(buf, op))
	}
	return g.submit("AllReduce", func(seq uint64, deadline time.Time) error {
		if g.smallPath(buf) {
			if err := g.debugCheck(seq, fmt.Sprintf("AllReduce(%s, %s)", op, buf), deadline); err != nil {
				return err
			}
			return g.smallAllReduce(context.Background(), seq, buf, op, deadline)
		}
		if err := g.checkSame(seq, fmt.Sprintf("AllReduce(%s, %s)", op, buf), deadline); err != nil {
			return err
		}
		if err := g.allReduce(seq, buf, op, deadline); err != nil {
			return err
		}
		if op == Avg {
			finishAvg(buf, g.size)
		}
		return nil
	})
}

// avgOf is what finishes an engine's reduction with op into buf: the
// division of Avg (nil for the other ops).
func (g *ProcessGroup) avgOf(buf Buffer, op ReduceOp) func() {
	if op != Avg {
		return nil
	}
	return func() { finishAvg(buf, g.size) }
}

func firstError(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (g *ProcessGroup) allReduce(seq uint64, buf Buffer, op ReduceOp, deadline time.Time) error {
	if g.size == 1 || buf.Len() == 0 {
		return nil
	}
	if len(buf.bytes) <= directAllReduceBytes || buf.Len() < g.size {
		return g.directAllReduce(seq, buf, op, deadline)
	}
	if g.shm != nil && len(buf.bytes) >= shmMinBytes {
		return g.shmAllReduce(seq, buf, op, deadline)
	}
	b := bounds(buf.Len(), g.size)
	if err := g.ringReduceScatter(seq, buf, b, op, 0, deadline); err != nil {
		return err
	}
	return g.ringAllGather(seq, buf, b, mod(g.rank+1, g.size), g.size-1, deadline)
}

// directAllReduce sends buf to every rank and folds all contributions in
// rank order, so every rank computes the identical result.
func (g *ProcessGroup) directAllReduce(seq uint64, buf Buffer, op ReduceOp, deadline time.Time) error {
	parts, err := g.exchange(kindCollective, seq, 0, buf.bytes, deadline)
	if err != nil {
		return err
	}
	parts[g.rank] = append([]byte(nil), buf.bytes...)
	copy(buf.bytes, parts[0])
	for r := 1; r < g.size; r++ {
		reduceInto(buf, Buffer{DType: buf.DType, bytes: parts[r]}, op)
	}
	return nil
}

// pieces splits chunk [lo, hi) of buf into pipelining units.
func pieces(buf Buffer, lo, hi int) []Buffer {
	per := max(1, pieceBytes/buf.DType.Size())
	var out []Buffer
	for i := lo; i < hi; i += per {
		out = append(out, buf.slice(i, min(i+per, hi)))
	}
	return out
}

// ringReduceScatter runs the n-1 reduce-scatter steps over chunks b: at step
// s rank r sends chunk r-s+shift right and reduces chunk r-s-1+shift from
// the left into buf, forwarding each reduced piece at once. Rank r ends
// holding the full reduction of chunk r+1+shift.
func (g *ProcessGroup) ringReduceScatter(seq uint64, buf Buffer, b []int, op ReduceOp, shift int, deadline time.Time) error {
	n, r := g.size, g.rank
	leftRank, rightRank := mod(r-1, n), mod(r+1, n)
	left, right := g.peers[leftRank], g.peers[rightRank]
	var sent []sentJob
	first := mod(r+shift, n)
	for i, piece := range pieces(buf, b[first], b[first+1]) {
		sent = append(sent, sentJob{rightRank, right.send(kindCollective, tag(seq, 0, i), g.opDesc, piece.bytes, deadline)})
	}
	scratch := make([]byte, min(pieceBytes, len(buf.bytes)))
	for s := 0; s < n-1; s++ {
		c := mod(r-s-1+shift, n)
		for i, piece := range pieces(buf, b[c], b[c+1]) {
			in := scratch[:len(piece.bytes)]
			if err := left.recv(kindCollective, tag(seq, s, i), g.opDesc, in, deadline); err != nil {
				return peerError(leftRank, err)
			}
			reduceInto(piece, Buffer{DType: buf.DType, bytes: in}, op)
			if s < n-2 {
				sent = append(sent, sentJob{rightRank, right.send(kindCollective, tag(seq, s+1, i), g.opDesc, piece.bytes, deadline)})
			}
		}
	}
	// The all-gather overwrites chunks these sends read from.
	return waitAll(sent)
}

// ringAllGather runs n-1 all-gather steps over chunks b starting from the
// chunk this rank owns: at step s it sends chunk owned-s right and receives
// chunk owned-s-1 from the left straight into buf. Steps are numbered from
// stepBase so frames cannot be confused with a preceding reduce-scatter's.
func (g *ProcessGroup) ringAllGather(seq uint64, buf Buffer, b []int, owned, stepBase int, deadline time.Time) error {
	n, r := g.size, g.rank
	leftRank, rightRank := mod(r-1, n), mod(r+1, n)
	left, right := g.peers[leftRank], g.peers[rightRank]
	var sent []sentJob
	for i, piece := range pieces(buf, b[owned], b[owned+1]) {
		sent = append(sent, sentJob{rightRank, right.send(kindCollective, tag(seq, stepBase, i), g.opDesc, piece.bytes, deadline)})
	}
	for s := 0; s < n-1; s++ {
		c := mod(owned-s-1, n)
		for i, piece := range pieces(buf, b[c], b[c+1]) {
			if err := left.recv(kindCollective, tag(seq, stepBase+s, i), g.opDesc, piece.bytes, deadline); err != nil {
				return peerError(leftRank, err)
			}
			if s < n-2 {
				sent = append(sent, sentJob{rightRank, right.send(kindCollective, tag(seq, stepBase+s+1, i), g.opDesc, piece.bytes, deadline)})
			}
		}
	}
	return waitAll(sent)
}

// Broadcast copies root's buf into every rank's buf.
func (g *ProcessGroup) Broadcast(ctx context.Context, buf Buffer, root int) error {
	return g.broadcast(ctx, buf, root).Wait(ctx)
}

// BroadcastAsync is Broadcast without waiting.
func (g *ProcessGroup) BroadcastAsync(buf Buffer, root int) *Work { return g.broadcast(nil, buf, root) }

// broadcast is Broadcast; a nil ctx makes it BroadcastAsync (an engine
// runs the other in its blocking form).
func (g *ProcessGroup) broadcast(ctx context.Context, buf Buffer, root int) *Work {
	if err := firstError(checkBuffer("Broadcast", buf), g.checkRank("Broadcast", "root", root)); err != nil {
		return finished("Broadcast", err)
	}
	if g.engine != nil {
		return g.engineOp(ctx, "Broadcast", engineCall{kind: opBroadcast, buf: buf, root: root}, nil)
	}
	return g.submit("Broadcast", func(seq uint64, deadline time.Time) error {
		if err := g.checkSame(seq, fmt.Sprintf("Broadcast(root %d, %s)", root, buf), deadline); err != nil {
			return err
		}
		if g.rank != root {
			if err := g.peers[root].recv(kindCollective, tag(seq, 0, 0), g.opDesc, buf.bytes, deadline); err != nil {
				return peerError(root, err)
			}
			return g.acknowledge(seq, root, deadline)
		}
		var sent []sentJob
		for r, p := range g.peers {
			if p != nil {
				sent = append(sent, sentJob{r, p.send(kindCollective, tag(seq, 0, 0), g.opDesc, buf.bytes, deadline)})
			}
		}
		if err := waitAll(sent); err != nil {
			return err
		}
		return g.awaitAcknowledgements(seq, deadline)
	})
}

// acknowledge and awaitAcknowledgements close a rooted collective whose
// root only sends (or only receives): the other side answers with an empty
// frame of the same descriptor. Without it, ranks that disagree on the
// root would each only send, and all return success with different data.
func (g *ProcessGroup) acknowledge(seq uint64, to int, deadline time.Time) error {
	return waitAll([]sentJob{{to, g.peers[to].send(kindCollective, tag(seq, 1, 0), g.opDesc, nil, deadline)}})
}

// sendAcknowledgements queues an acknowledgement to every peer.
func (g *ProcessGroup) sendAcknowledgements(seq uint64, deadline time.Time) []sentJob {
	var acks []sentJob
	for r, p := range g.peers {
		if p != nil {
			acks = append(acks, sentJob{r, p.send(kindCollective, tag(seq, 1, 0), g.opDesc, nil, deadline)})
		}
	}
	return acks
}

func (g *ProcessGroup) awaitAcknowledgement(seq uint64, from int, deadline time.Time) error {
	if err := g.peers[from].recv(kindCollective, tag(seq, 1, 0), g.opDesc, nil, deadline); err != nil {
		return peerError(from, err)
	}
	return nil
}

func (g *ProcessGroup) awaitAcknowledgements(seq uint64, deadline time.Time) error {
	for r, p := range g.peers {
		if p == nil {
			continue
		}
		if err := g.awaitAcknowledgement(seq, r, deadline); err != nil {
			return err
		}
	}
	return nil
}

func (g *ProcessGroup) checkRank(op, what string, r int) error {
	if r < 0 || r >= g.size {
		return fmt.Errorf("ddp: %s: %s %d outside [0, %d)", op, what, r, g.size)
	}
	return nil
}

func checkLen(op, what string, b Buffer, want int) error {
	if b.Len() != want {
		return fmt.Errorf("ddp: %s: %s has %d elements, want %d", op, what, b.Len(), want)
	}
	return nil
}

// AllGather concatenates every rank's in into out, in rank order
// (out.Len() = WorldSize × in.Len()).
func (g *ProcessGroup) AllGather(ctx context.Context, out, in Buffer) error {
	return g.allGather(ctx, out, in).Wait(ctx)
}

// AllGatherAsync is AllGather without waiting.
func (g *ProcessGroup) AllGatherAsync(out, in Buffer) *Work { return g.allGather(nil, out, in) }

// allGather is AllGather; a nil ctx makes it AllGatherAsync.
func (g *ProcessGroup) allGather(ctx context.Context, out, in Buffer) *Work {
	err := firstError(checkBuffer("AllGather", in), checkLen("AllGather", "out", out, g.size*in.Len()))
	if err == nil && out.DType != in.DType {
		err = fmt.Errorf("ddp: AllGather: out is %s but in is %s", out.DType, in.DType)
	}
	if err != nil {
		return finished("AllGather", err)
	}
	if g.engine != nil {
		return g.engineOp(ctx, "AllGather", engineCall{kind: opAllGather, in: in, out: out}, nil)
	}
	return g.submit("AllGather", func(seq uint64, deadline time.Time) error {
		if err := g.checkSame(seq, fmt.Sprintf("AllGather(%s)", in), deadline); err != nil {
			return err
		}
		n := in.Len()
		copy(out.slice(g.rank*n, (g.rank+1)*n).bytes, in.bytes)
		if g.size == 1 || n == 0 {
			return nil
		}
		b := make([]int, g.size+1)
		for i := range b {
			b[i] = i * n
		}
		return g.ringAllGather(seq, out, b, g.rank, 0, deadline)
	})
}

// ReduceScatter reduces in across ranks with op and gives rank r the r-th
// block (in.Len() = WorldSize × out.Len()); in is left unchanged.
func (g *ProcessGroup) ReduceScatter(ctx context.Context, out, in Buffer, op ReduceOp) error {
	return g.reduceScatter(ctx, out, in, op).Wait(ctx)
}

// ReduceScatterAsync is ReduceScatter without waiting.
func (g *ProcessGroup) ReduceScatterAsync(out, in Buffer, op ReduceOp) *Work {
	return g.reduceScatter(nil, out, in, op)
}

// reduceScatter is ReduceScatter; a nil ctx makes it ReduceScatterAsync.
func (g *ProcessGroup) reduceScatter(ctx context.Context, out, in Buffer, op ReduceOp) *Work {
	err := firstError(checkBuffer("ReduceScatter", in), checkOp("ReduceScatter", op), checkLen("ReduceScatter", "in", in, g.size*out.Len()))
	if err == nil && out.DType != in.DType {
		err = fmt.Errorf("ddp: ReduceScatter: out is %s but in is %s", out.DType, in.DType)
	}
	if err != nil {
		return finished("ReduceScatter", err)
	}
	if g.engine != nil {
		return g.engineOp(ctx, "ReduceScatter", engineCall{kind: opReduceScatter, in: in, out: out, op: op}, g.avgOf(out, op))
	}
	return g.submit("ReduceScatter", func(seq uint64, deadline time.Time) error {
		if err := g.checkSame(seq, fmt.Sprintf("ReduceScatter(%s, %s)", op, in), deadline); err != nil {
			return err
		}
		n := out.Len()
		work := Buffer{DType: in.DType, bytes: append([]byte(nil), in.bytes...)}
		if g.size > 1 && n > 0 {
			b := make([]int, g.size+1)
			for i := range b {
				b[i] = i * n
			}
			if err := g.ringReduceScatter(seq, work, b, op, -1, deadline); err != nil {
				return err
			}
		}
		copy(out.bytes, work.slice(g.rank*n, (g.rank+1)*n).bytes)
		if op == Avg {
			finishAvg(out, g.size)
		}
		return nil
	})
}

// exchange sends msg to every peer and returns what each sent (nil for
// this rank): a barrier that also carries data of one size on every rank.
func (g *ProcessGroup) exchange(kind uint32, seq uint64, step int, msg []byte, deadline time.Time) ([][]byte, error) {
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
