package launch

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/internal/flight"
)

// TestFlightSummary: `ddprun flight DIR` diagnoses each directory of
// records under DIR (a $XLADDP_FLIGHT_DIR with jobs and attempts), naming
// a rank that wrote none; a damaged record is said as such; a directory
// without records is an error that says where records come from.
func TestFlightSummary(t *testing.T) {
	dir := t.TempDir()
	attempt := filepath.Join(dir, "job-20261126-120000-42", "attempt_0")
	for rank, seq := range []uint64{9, 8} {
		entries := []flight.Entry{{Op: flight.Op{Seq: seq, Name: "AllReduce", DType: "float32", Count: 4, Peer: -1},
			State: flight.Started, Caller: "train.go:12"}}
		require.NoError(t, flight.Write(attempt, flight.Dump{Rank: rank, World: 3, Transport: "tcp", Reason: "SIGUSR1", Entries: entries}))
	}
	damaged := filepath.Join(dir, "job-20261126-130000-43", "attempt_0")
	require.NoError(t, os.MkdirAll(damaged, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(damaged, flight.DumpName(0)), []byte("{"), 0o644))

	var out bytes.Buffer
	require.NoError(t, FlightSummary(&out, dir))
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	require.Len(t, lines, 2, out.String())
	assert.Contains(t, string(lines[0]), attempt+": ")
	assert.Contains(t, string(lines[0]), "rank 2 left no flight dump")
	assert.Contains(t, string(lines[0]), "#8")
	assert.Contains(t, string(lines[1]), "unreadable")

	err := FlightSummary(&out, t.TempDir())
	assert.ErrorContains(t, err, "no flight records")
	assert.ErrorContains(t, err, "kill -USR1")
	assert.Error(t, FlightSummary(&out, filepath.Join(dir, "missing")))
	// Records are looked for two levels below DIR (job, attempt), not in
	// the whole tree below it (a mistyped DIR such as /).
	deep := t.TempDir()
	require.NoError(t, flight.Write(filepath.Join(deep, "a", "b", "c"), flight.Dump{Rank: 0, World: 1, Transport: "tcp"}))
	err = FlightSummary(&out, deep)
	assert.ErrorContains(t, err, "no flight records")
	start := time.Now()
	_ = FlightSummary(io.Discard, "/")
	assert.Less(t, time.Since(start), 5*time.Second, "/ is not read whole")
}
