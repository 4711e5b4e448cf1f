package nodelist

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExpand: scontrol show hostnames' expansion.
func TestExpand(t *testing.T) {
	cases := map[string][]string{
		"node1":                  {"node1"},
		"a,b":                    {"a", "b"},
		"node[01-03,07]":         {"node01", "node02", "node03", "node07"},
		"gpu-[1-2]-ib,cpu[9-10]": {"gpu-1-ib", "gpu-2-ib", "cpu9", "cpu10"},
		"r[1-2]n[1-2]":           {"r1n1", "r1n2", "r2n1", "r2n2"},
		"x[5]":                   {"x5"},
	}
	for in, want := range cases {
		got, err := Expand(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "a,,b", "n[", "n]", "n[a-b]", "n[2-1]", "n[-1]", "n[9223372036854775808]"} {
		_, err := Expand(bad)
		assert.Error(t, err, bad)
	}
}

// TestExpandIsBounded: ranges near 2^63 (whose count overflows),
// and lists that multiply or repeat past the bound, are refused at once,
// before anything is allocated; ddprun names the variable.
func TestExpandIsBounded(t *testing.T) {
	huge := []string{
		"n[0-9223372036854775807]",
		"n[1-9223372036854775807]",
		"n[9223372036854775807-9223372036854775807]x[0-9223372036854775807]",
		"a[0-255]b[0-255]c[0-1]",
		strings.Repeat("n[0-65535],", 2) + "n1",
		"n[0-65535,0-65535]",
	}
	for _, in := range huge {
		start := time.Now()
		_, err := Expand(in)
		assert.ErrorContains(t, err, "expands to more than 65536 hosts", in)
		assert.Less(t, time.Since(start), time.Second, in)
	}
	got, err := Expand("n[9223372036854775807]")
	require.NoError(t, err)
	assert.Equal(t, []string{"n9223372036854775807"}, got)
	got, err = Expand("n[9223372036854775806-9223372036854775807]")
	require.NoError(t, err)
	assert.Equal(t, []string{"n9223372036854775806", "n9223372036854775807"}, got)

}

// FuzzExpand: any list is expanded within the bound or refused,
// never a panic, a hang or more than the bound of names.
func FuzzExpand(f *testing.F) {
	for _, seed := range []string{"node[01-03,07],gpu-a", "r[1-2]n[1-2]", "n[9223372036854775806-9223372036854775807]", "x[5]", "[", "a,,b"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := Expand(s)
		if err != nil {
			return
		}
		if len(hosts) == 0 || len(hosts) > MaxHosts {
			t.Fatalf("%q expanded to %d hosts", s, len(hosts))
		}
		for _, h := range hosts {
			if h == "" {
				t.Fatalf("%q expanded to an empty host name", s)
			}
		}
	})
}
