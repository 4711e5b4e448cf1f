package quote

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// MaxBytes is how much of a value Short and Bytes show; MaxTextBytes how
// much of a sentence Text shows.
const (
	MaxBytes     = 80
	MaxTextBytes = 1024
)

// Short is s as a Go-quoted string, cut after MaxBytes bytes (at a rune
// boundary) with the full length said.
func Short(s string) string { return quoted(s, len(s), MaxBytes) }

// Bytes is Short of b, copying no more of b than it shows.
func Bytes(b []byte) string { return quoted(head(b, MaxBytes), len(b), MaxBytes) }

// Text is b, a sentence another process wrote for people (a peer's
// failure report), as it is when it is printable UTF-8 of at most
// MaxTextBytes; else quoted and cut as Short, at MaxTextBytes.
func Text(b []byte) string {
	s := head(b, MaxTextBytes)
	if len(b) <= MaxTextBytes && utf8.ValidString(s) && printable(s) {
		return s
	}
	return quoted(s, len(b), MaxTextBytes)
}

// head is the first limit+1 bytes of b (all of it when shorter), enough to
// tell that it is longer than limit.
func head(b []byte, limit int) string { return string(b[:min(len(b), limit+1)]) }

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// quoted quotes s (the start of a value of total bytes), cut at the last
// rune start at or before limit when the value is longer.
func quoted(s string, total, limit int) string {
	if total <= limit {
		return strconv.Quote(s)
	}
	n := limit
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:n]), total)
}
