package knobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTableIsTheDocs: docs/architecture.md's table of the knobs a user
// may set is this table, row for row: name, default and meaning.
func TestTableIsTheDocs(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "architecture.md"))
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "Every `XLADDP_*` variable a user may set")
	require.True(t, ok, "docs/architecture.md has lost its knob table")
	var rows [][3]string
	for line := range strings.Lines(rest) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "| `XLADDP_") {
			if len(rows) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		require.Len(t, cells, 3, "row %q", line)
		rows = append(rows, [3]string{strings.Trim(strings.TrimSpace(cells[0]), "`"), strings.TrimSpace(cells[1]),
			strings.TrimSpace(cells[2])})
	}
	var want [][3]string
	for _, k := range Table() {
		want = append(want, [3]string{k.Name, k.Default, k.Means})
	}
	assert.Equal(t, want, rows)
}

// TestParsers: each parser takes its documented values and refuses the
// rest with the variable's name.
func TestParsers(t *testing.T) {
	d, err := Timeout("90")
	require.NoError(t, err)
	assert.Equal(t, "1m30s", d.String())
	d, err = Timeout(" 15m ")
	require.NoError(t, err)
	assert.Equal(t, "15m0s", d.String())
	n, err := ShmMiB("")
	require.NoError(t, err)
	assert.Equal(t, DefaultShmMiB, n)
	n, err = ShmMiB("0")
	require.NoError(t, err)
	assert.Zero(t, n)
	on, err := SharePrograms("OFF")
	require.NoError(t, err)
	assert.False(t, on)
	level, err := MPIThreads("MPI_THREAD_FUNNELED")
	require.NoError(t, err)
	assert.Equal(t, "funneled", level)
	for _, tc := range []struct {
		name string
		err  error
	}{
		{EnvTimeout, discard(Timeout)("banana")},
		{EnvShmMiB, discard(ShmMiB)("abc")},
		{EnvCPUDevices, func() error { _, err := CPUDevices(EnvCPUDevices, "0"); return err }()},
		{EnvCPUKernels, discard(CPUKernels)("mkl")},
		{EnvDevice, device("tpu")},
		{EnvBackend, discard(Transport)("nccl")},
	} {
		assert.ErrorContains(t, tc.err, "$"+tc.name)
	}
	assert.ErrorIs(t, words("on", "off")("of"), ErrMisread)
}
