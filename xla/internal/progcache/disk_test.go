package progcache

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What Store writes, Load reads back only under the same header; a
// truncated or foreign file is an error (the caller's miss), never a
// wrong program.
func TestDiskRoundTripAndRefusals(t *testing.T) {
	d := &Disk{Dir: t.TempDir(), Identity: "plugin", Lowering: "code", XLAFlags: ""}
	h := d.Header("fp", []int{0, 1}, []string{"f32[2]"}, []string{"f32[2]", "f32[]"})
	assert.Equal(t, 2, h.Outputs)
	require.NoError(t, d.Store(h, []byte("executable")))
	got, data, err := d.Load(h)
	require.NoError(t, err)
	assert.Equal(t, "executable", string(data))
	assert.Equal(t, h.Fingerprint, got.Fingerprint)

	other := d.Header("fp", []int{1, 0}, []string{"f32[2]"}, []string{"f32[2]", "f32[]"})
	_, _, err = d.Load(other)
	assert.ErrorIs(t, err, os.ErrNotExist, "another device assignment is another file")

	raw, err := os.ReadFile(d.Path(h))
	require.NoError(t, err)
	for name, bad := range map[string][]byte{
		"empty":            nil,
		"magic only":       raw[:8],
		"truncated header": raw[:20],
	} {
		_, _, err := ParseFile(bad)
		assert.Error(t, err, name)
	}
	require.NoError(t, os.WriteFile(d.Path(h), raw[:20], 0o644))
	_, _, err = d.Load(h)
	assert.ErrorContains(t, err, "truncated header")

	assert.Equal(t, "", ResolveDir("off"))
	assert.Equal(t, "/x", ResolveDir("/x"))
	assert.NotEmpty(t, ResolveDir(""))
}
