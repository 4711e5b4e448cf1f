package quote

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestShort(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", `""`},
		{"n[1-2]", `"n[1-2]"`},
		{"line\nforged", `"line\nforged"`},
		{strings.Repeat("a", MaxBytes), `"` + strings.Repeat("a", MaxBytes) + `"`},
		{strings.Repeat("a", 64<<20), `"` + strings.Repeat("a", MaxBytes) + `"… (67108864 bytes)`},
		// A cut never splits a rune: é is 2 bytes, so 79 bytes of a's and
		// then é would straddle the limit.
		{strings.Repeat("a", MaxBytes-1) + "éé", `"` + strings.Repeat("a", MaxBytes-1) + `"… (83 bytes)`},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Short(c.in))
		assert.Equal(t, c.want, Bytes([]byte(c.in)))
	}
}

func TestText(t *testing.T) {
	cases := []struct{ in, want string }{
		{"rank 1 is claimed twice: by host pid 7", "rank 1 is claimed twice: by host pid 7"},
		{"forged\nddprun: all good", `"forged\nddprun: all good"`},
		{"\xff\xfe", `"\xff\xfe"`},
		{strings.Repeat("x", 64<<20), `"` + strings.Repeat("x", MaxTextBytes) + `"… (67108864 bytes)`},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Text([]byte(c.in)))
	}
}
