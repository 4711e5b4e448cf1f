package xla

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMetricsFileGetsALinePerClose: with XLADDP_METRICS_FILE set, each
// engine's Close appends the process's metrics as one JSON line; an
// unwritable path is Close's error, saying which variable.
func TestMetricsFileGetsALinePerClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	t.Setenv(EnvMetricsFile, path)
	for range 2 {
		e := newEngine(t, 1)
		x := mustFromSlice(t, e.Device(0), []float32{1, 2}, 2)
		_, err := x.AddScalar(1).Float32s(testContext(t))
		require.NoError(t, err)
		require.NoError(t, e.Close())
		require.NoError(t, e.Close(), "closing twice writes nothing more")
	}
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	require.Len(t, lines, 2)
	var got metricsLine
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &got))
	assert.Equal(t, os.Getpid(), got.PID)
	assert.Positive(t, got.Metrics.Executions)

	t.Setenv(EnvMetricsFile, filepath.Join(t.TempDir(), "no", "such", "dir", "m.jsonl"))
	e := newEngine(t, 1)
	assert.ErrorContains(t, e.Close(), "$XLADDP_METRICS_FILE")

	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	t.Setenv(EnvMetricsFile, fifo)
	e = newEngine(t, 1)
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-closed:
		assert.ErrorContains(t, err, "$XLADDP_METRICS_FILE", "a FIFO nobody reads is an error, not a hang")
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung on a FIFO nobody reads")
	}
}
