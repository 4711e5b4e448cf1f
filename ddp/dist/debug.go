package dist

import (
	"bytes"
	"fmt"
	"strings"
	"time"
)

// fingerprintSize is the fixed size of a collective's description frame.
const fingerprintSize = 256

// checkSame starts collective seq, described by desc (kind, dtype,
// length, reduce op, root). Every frame of it carries desc's hash, which
// each receive checks, so ranks that disagree fail on every call at no
// extra cost. In debug mode it also exchanges the full descriptions with
// every rank first: if any differ, every rank fails with all ranks'
// descriptions, the hang torch users get from mismatched collectives
// turned into a message.
func (g *ProcessGroup) checkSame(seq uint64, desc string, deadline time.Time) error {
	g.opDesc = descriptor(desc)
	if g.shm != nil {
		g.shm.publish(g.rank, seq, g.opDesc)
	}
	return g.debugCheck(seq, desc, deadline)
}

// debugCheck is checkSame's comparison of full descriptions (debug mode).
func (g *ProcessGroup) debugCheck(seq uint64, desc string, deadline time.Time) error {
	if !g.debug || g.size == 1 {
		return nil
	}
	mine := make([]byte, fingerprintSize)
	copy(mine, fmt.Sprintf("#%d %s", seq, desc))
	all, err := g.exchange(kindDebug, seq, 0, mine, deadline)
	if err != nil {
		return err
	}
	all[g.rank] = mine
	return compareFingerprints(seq, all, mine)
}

// compareFingerprints fails with every rank's description unless all
// match this rank's.
func compareFingerprints(seq uint64, all [][]byte, mine []byte) error {
	same := true
	for _, f := range all {
		same = same && bytes.Equal(f, mine)
	}
	if same {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%v at collective #%d:", ErrMismatch, seq)
	for r, f := range all {
		fmt.Fprintf(&b, "\n  rank %d: %s", r, bytes.TrimRight(f, "\x00"))
	}
	return fmt.Errorf("%w", &mismatchError{msg: b.String()})
}

type mismatchError struct{ msg string }

func (e *mismatchError) Error() string        { return e.msg }
func (e *mismatchError) Is(target error) bool { return target == ErrMismatch }
