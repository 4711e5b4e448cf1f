package quote

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxBytes is how much of a value Short shows.
const MaxBytes = 80

// Short is s as a Go-quoted string, cut after MaxBytes bytes (at a rune
// boundary) with the full length said.
func Short(s string) string {
	if len(s) <= MaxBytes {
		return strconv.Quote(s)
	}
	return cut(s[:MaxBytes+1], len(s))
}

// cut quotes head (MaxBytes+1 bytes of a longer value) up to the last rune
// start at or before MaxBytes, and says the value's length.
func cut(head string, total int) string {
	n := MaxBytes
	for n > 0 && !utf8.RuneStart(head[n]) {
		n--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(head[:n]), total)
}

// Bytes is Short of b, copying no more of b than it shows.
func Bytes(b []byte) string {
	if len(b) <= MaxBytes {
		return strconv.Quote(string(b))
	}
	return cut(string(b[:MaxBytes+1]), len(b))
}
