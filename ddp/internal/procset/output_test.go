package procset

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCopyLinesCutsHugeLines: a worker's line longer than MaxOutputLine
// is cut into lines of that length, and the output after it still comes
// through; an unfinished last line gets its newline.
func TestCopyLinesCutsHugeLines(t *testing.T) {
	huge := strings.Repeat("x", MaxOutputLine+10)
	in := "first\n" + huge + "\nafter\nunfinished"
	var out lineRecorder
	var wg sync.WaitGroup
	wg.Add(1)
	CopyLines(&wg, strings.NewReader(in), &out)
	wg.Wait()
	require.Len(t, out.lines, 5)
	assert.Equal(t, "first\n", out.lines[0])
	assert.Equal(t, strings.Repeat("x", MaxOutputLine)+"\n", out.lines[1])
	assert.Equal(t, "xxxxxxxxxx\n", out.lines[2])
	assert.Equal(t, "after\n", out.lines[3], "the output after a huge line comes through")
	assert.Equal(t, "unfinished\n", out.lines[4])
}

// lineRecorder keeps each Write.
type lineRecorder struct{ lines []string }

func (l *lineRecorder) Write(p []byte) (int, error) {
	l.lines = append(l.lines, string(p))
	return len(p), nil
}
