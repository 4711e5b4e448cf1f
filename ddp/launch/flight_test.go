package launch

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFlightDir: a $XLADDP_FLIGHT_DIR that cannot hold the records is
// refused before any worker starts; a usable one gets each attempt's
// records (attempt_0, attempt_1 after a restart), kept after the job.
func TestFlightDir(t *testing.T) {
	t.Run("unusable", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "a-file")
		require.NoError(t, os.WriteFile(file, nil, 0o644))
		mark := "flight-bad" + strconv.FormatInt(time.Now().UnixNano(), 36)
		res := runAgent(t.Context(), t, mark, "ok", []string{"--nproc_per_node=2"}, "XLADDP_FLIGHT_DIR="+filepath.Join(file, "sub"))
		assert.Equal(t, 1, res.code)
		assert.Contains(t, res.stderr, "$XLADDP_FLIGHT_DIR="+filepath.Join(file, "sub")+" cannot hold the workers' flight records")
		assert.NotContains(t, res.stdout, "sum", "no worker started")
	})
	t.Run("kept per attempt", func(t *testing.T) {
		dir := t.TempDir()
		mark := "flight-dir" + strconv.FormatInt(time.Now().UnixNano(), 36)
		_, before := leftovers(t, mark)
		res := runAgent(t.Context(), t, mark, "fail", []string{"--nproc_per_node=3", "--max_restarts=1", "--monitor_interval=0.05"},
			"XLADDP_TEST_TIMEOUT=3s", "XLADDP_FLIGHT_DIR="+dir)
		assert.Equal(t, 3, res.code, res.stderr)
		assert.Contains(t, res.stderr, "ddprun: flight record ("+filepath.Join(dir, "attempt_1")+"): rank 1 finished AllReduce #1")
		for _, attempt := range []string{"attempt_0", "attempt_1"} {
			dumps, _ := filepath.Glob(filepath.Join(dir, attempt, "flight-rank*.json"))
			assert.Len(t, dumps, 3, attempt)
		}
		assertNothingLeft(t, mark, before)
	})
}
