package report

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/internal/procfs"
	"gonum.org/v1/plot"
)

func TestWholeTicks(t *testing.T) {
	values := func(ticks []plot.Tick) []float64 {
		var out []float64
		for _, tk := range ticks {
			out = append(out, tk.Value)
		}
		return out
	}
	for _, tc := range []struct {
		lo, hi float64
		want   []float64
	}{
		{1, 1, []float64{1}},
		{1, 2, []float64{1, 2}},
		{0.8, 3.2, []float64{1, 2, 3}},
		{1, 25, []float64{1, 4, 7, 10, 13, 16, 19, 22, 25}},
		{1.2, 1.8, nil},
	} {
		assert.Equal(t, tc.want, values(wholeTicks.Ticks(tc.lo, tc.hi)), "[%g, %g]", tc.lo, tc.hi)
	}
}

// TestWritePNG: the curves become a decodable PNG, whole or not at all;
// a name that is not .png, an empty run and a missing directory are errors.
func TestWritePNG(t *testing.T) {
	dir := t.TempDir()
	c := Curves{Title: "t", AccuracyOf: "val"}
	assert.ErrorContains(t, c.WritePNG(filepath.Join(dir, "x.png")), "no step finished")
	c.AddLoss(1, 2)
	c.AddLoss(2, 1)
	c.AddAccuracy(1, 0.5)
	c.AddAccuracy(2, 0.9)
	assert.ErrorContains(t, c.WritePNG(filepath.Join(dir, "x.jpg")), "name a .png file")
	assert.Error(t, c.WritePNG(filepath.Join(dir, "missing", "x.png")))
	path := filepath.Join(dir, "X.PNG")
	require.NoError(t, c.WritePNG(path))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	assert.Equal(t, 2*img.Bounds().Dy()*6/4, img.Bounds().Dx(), "two 6×4 panels side by side")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, procfs.CreateMode("/proc"), info.Mode().Perm(), "the mode os.Create gives (umask), not os.CreateTemp's 0600")
}
