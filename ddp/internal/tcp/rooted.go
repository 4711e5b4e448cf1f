package tcp

import (
	"time"

	"github.com/xladdp/xladdp/ddp/internal/transport"
)

// broadcast copies root's buf into every rank's buf.
func (g *group) broadcast(seq uint64, buf Buffer, root int, deadline time.Time) error {
	if g.rank != root {
		if err := g.peers[root].recv(kindCollective, tag(seq, 0, 0), g.opDesc, buf.Bytes(), deadline); err != nil {
			return peerError(root, err)
		}
		return g.acknowledge(seq, root, deadline)
	}
	var sent []sentJob
	for r, p := range g.peers {
		if p != nil {
			sent = append(sent, sentJob{r, p.send(kindCollective, tag(seq, 0, 0), g.opDesc, buf.Bytes(), deadline)})
		}
	}
	if err := waitAll(sent); err != nil {
		return err
	}
	return g.awaitAcknowledgements(seq, deadline)
}

// acknowledge and awaitAcknowledgements close a rooted collective whose
// root only sends (or only receives): the other side answers with an empty
// frame of the same descriptor. Without it, ranks that disagree on the
// root would each only send, and all return success with different data.
func (g *group) acknowledge(seq uint64, to int, deadline time.Time) error {
	return waitAll([]sentJob{{to, g.peers[to].send(kindCollective, tag(seq, 1, 0), g.opDesc, nil, deadline)}})
}

// sendAcknowledgements queues an acknowledgement to every peer.
func (g *group) sendAcknowledgements(seq uint64, deadline time.Time) []sentJob {
	var acks []sentJob
	for r, p := range g.peers {
		if p != nil {
			acks = append(acks, sentJob{r, p.send(kindCollective, tag(seq, 1, 0), g.opDesc, nil, deadline)})
		}
	}
	return acks
}

func (g *group) awaitAcknowledgement(seq uint64, from int, deadline time.Time) error {
	if err := g.peers[from].recv(kindCollective, tag(seq, 1, 0), g.opDesc, nil, deadline); err != nil {
		return peerError(from, err)
	}
	return nil
}

func (g *group) awaitAcknowledgements(seq uint64, deadline time.Time) error {
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

func offsets(splits []int) []int {
	o := make([]int, len(splits)+1)
	for i, s := range splits {
		o[i+1] = o[i] + s
	}
	return o
}

// allToAll sends in's r-th segment to rank r and receives rank r's
// segment for this rank into out's r-th segment (the splits the group
// checked).
func (g *group) allToAll(seq uint64, c transport.Call, deadline time.Time) error {
	in, out := c.In, c.Out
	inO, outO := offsets(c.InSplits), offsets(c.OutSplits)
	var sent []sentJob
	for r, p := range g.peers {
		if p != nil {
			sent = append(sent, sentJob{r, p.send(kindCollective, tag(seq, 0, 0), g.opDesc, in.Slice(inO[r], inO[r+1]).Bytes(), deadline)})
		}
	}
	copy(out.Slice(outO[g.rank], outO[g.rank+1]).Bytes(), in.Slice(inO[g.rank], inO[g.rank+1]).Bytes())
	for r, p := range g.peers {
		if p == nil {
			continue
		}
		if err := p.recv(kindCollective, tag(seq, 0, 0), g.opDesc, out.Slice(outO[r], outO[r+1]).Bytes(), deadline); err != nil {
			return peerError(r, err)
		}
	}
	return waitAll(sent)
}

// gather collects every rank's in at root into out, in rank order.
func (g *group) gather(seq uint64, out, in Buffer, root int, deadline time.Time) error {
	if g.rank != root {
		if err := waitAll([]sentJob{{root, g.peers[root].send(kindCollective, tag(seq, 0, 0), g.opDesc, in.Bytes(), deadline)}}); err != nil {
			return err
		}
		return g.awaitAcknowledgement(seq, root, deadline)
	}
	// The root's empty frame to every sender (sent first, so ranks that
	// disagree on the root, each only receiving, still see each other).
	acks := g.sendAcknowledgements(seq, deadline)
	n := in.Len()
	copy(out.Slice(root*n, (root+1)*n).Bytes(), in.Bytes())
	for r, p := range g.peers {
		if p == nil {
			continue
		}
		if err := p.recv(kindCollective, tag(seq, 0, 0), g.opDesc, out.Slice(r*n, (r+1)*n).Bytes(), deadline); err != nil {
			return peerError(r, err)
		}
	}
	return waitAll(acks)
}

// scatter gives rank r the r-th block of root's in.
func (g *group) scatter(seq uint64, out, in Buffer, root int, deadline time.Time) error {
	n := out.Len()
	if g.rank != root {
		if err := g.peers[root].recv(kindCollective, tag(seq, 0, 0), g.opDesc, out.Bytes(), deadline); err != nil {
			return peerError(root, err)
		}
		return g.acknowledge(seq, root, deadline)
	}
	var sent []sentJob
	for r, p := range g.peers {
		if p != nil {
			sent = append(sent, sentJob{r, p.send(kindCollective, tag(seq, 0, 0), g.opDesc, in.Slice(r*n, (r+1)*n).Bytes(), deadline)})
		}
	}
	copy(out.Bytes(), in.Slice(root*n, (root+1)*n).Bytes())
	if err := waitAll(sent); err != nil {
		return err
	}
	return g.awaitAcknowledgements(seq, deadline)
}
