package transport

import (
	"bytes"
	"fmt"
	"strings"
)

// FingerprintSize is the fixed size of a collective's description as
// ranks compare it in debug mode.
const FingerprintSize = 256

// Fingerprint is collective seq's description, padded to FingerprintSize.
func Fingerprint(seq uint64, desc string) []byte {
	mine := make([]byte, FingerprintSize)
	copy(mine, fmt.Sprintf("#%d %s", seq, desc))
	return mine
}

// CompareFingerprints fails with every rank's description unless all
// match this rank's.
func CompareFingerprints(seq uint64, all [][]byte, mine []byte) error {
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
	return fmt.Errorf("%w", &MismatchError{Msg: b.String()})
}
