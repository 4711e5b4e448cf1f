package tcp

import (
	"time"

	"github.com/xladdp/xladdp/ddp/internal/transport"
)

// checkSame starts collective seq, described by desc (kind, dtype,
// length, reduce op, root). Every frame of it carries desc's hash, which
// each receive checks, so ranks that disagree fail on every call at no
// extra cost. In debug mode it also exchanges the full descriptions with
// every rank first: if any differ, every rank fails with all ranks'
// descriptions, the hang torch users get from mismatched collectives
// turned into a message.
func (g *group) checkSame(seq uint64, desc string, deadline time.Time) error {
	g.opDesc = descriptor(desc)
	if g.shm != nil {
		g.shm.publish(g.rank, seq, g.opDesc)
	}
	return g.debugCheck(seq, desc, deadline)
}

// debugCheck is checkSame's comparison of full descriptions (debug mode).
func (g *group) debugCheck(seq uint64, desc string, deadline time.Time) error {
	if !g.debug || g.size == 1 {
		return nil
	}
	mine := transport.Fingerprint(seq, desc)
	all, err := g.exchange(kindDebug, seq, 0, mine, deadline)
	if err != nil {
		return err
	}
	all[g.rank] = mine
	return transport.CompareFingerprints(seq, all, mine)
}
