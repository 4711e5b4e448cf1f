package ddp_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
)

// spawnScenarioEnv makes the test binary, re-executed by Spawn, run
// spawnTrain in the child.
const spawnScenarioEnv = "XLADDP_TEST_SPAWN"

// spawnTrain trains the toy on w's quarter of the batch with Wrap and
// writes its parameters' hash to $XLADDP_TEST_DIR/rank<N>; a rank named
// by $XLADDP_TEST_SPAWN_FAIL fails instead.
func spawnTrain(ctx context.Context, w ddp.Worker) error {
	if fmt.Sprint(w.Rank) == os.Getenv("XLADDP_TEST_SPAWN_FAIL") {
		return fmt.Errorf("rank %d was told to fail", w.Rank)
	}
	if os.Getenv("XLADDP_TEST_SPAWN_HANG") == "1" {
		<-ctx.Done() // until stopped
		return ctx.Err()
	}
	rows := ddptest.GlobalRows / w.WorldSize
	params, err := ddptest.TrainModel(ctx, w.Device, ddptest.Run{Kind: "toy", Seed: 100 + uint64(w.Rank), Steps: 5,
		Shards: ddptest.Split(w.Rank*rows, (w.Rank+1)*rows, 1), Wrap: true, Mark: func() error { return w.Device.MarkStep(ctx) }})
	if err != nil {
		return err
	}
	line := fmt.Sprintf("%d %d %d %s", w.Rank, w.WorldSize, w.LocalRank, ddptest.HashParams(params))
	return os.WriteFile(filepath.Join(os.Getenv("XLADDP_TEST_DIR"), fmt.Sprintf("rank%d", w.Rank)), []byte(line), 0o600)
}

func init() {
	if scenario := os.Getenv(spawnScenarioEnv); (scenario == "train" || scenario == "return") && ddp.SpawnedChild() {
		// A Spawn child: run the worker; Spawn exits the process when
		// asked, else returns here, and the child says so.
		err := ddp.Spawn(context.Background(), spawnTrain, ddp.SpawnOptions{Device: backend.Options{Target: backend.CPU},
			ExitChild: os.Getenv(spawnScenarioEnv) != "return"})
		returned := fmt.Sprintf("returned %v", err)
		_ = os.WriteFile(filepath.Join(os.Getenv("XLADDP_TEST_DIR"), "returned"+os.Getenv(dist.EnvRank)), []byte(returned), 0o600)
		os.Exit(0)
	}
}

// readSpawned reads every rank's line.
func readSpawned(t *testing.T, dir string, n int) []string {
	t.Helper()
	var lines []string
	for r := range n {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d", r)))
		require.NoError(t, err, "rank %d wrote nothing", r)
		lines = append(lines, string(b))
	}
	return lines
}

// TestSpawn: fn runs once per device, with ranks 0..n-1 of n, in one
// process (RunReplicas) or one process per device; the wrapped model
// trains to the same parameters everywhere, and both modes agree.
func TestSpawn(t *testing.T) {
	var hashes []string
	for _, processes := range []bool{false, true} {
		t.Run(fmt.Sprintf("processes=%v", processes), func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("XLADDP_TEST_DIR", dir)
			t.Setenv(spawnScenarioEnv, "train")
			err := ddp.Spawn(t.Context(), spawnTrain, ddp.SpawnOptions{Devices: 2, Processes: processes,
				Device: backend.Options{Target: backend.CPU}, Command: []string{os.Args[0], "-test.run=^$"}})
			require.NoError(t, err)
			lines := readSpawned(t, dir, 2)
			for r, l := range lines {
				f := strings.Fields(l)
				assert.Equal(t, []string{fmt.Sprint(r), "2", fmt.Sprint(r)}, f[:3])
				assert.Equal(t, strings.Fields(lines[0])[3], f[3], "rank %d's parameters differ from rank 0's", r)
			}
			hashes = append(hashes, strings.Fields(lines[0])[3])
		})
	}
	if len(hashes) == 2 {
		assert.Equal(t, hashes[0], hashes[1], "one process and one process per device trained differently")
	}
}

// TestSpawnFailure: a failing replica or process is Spawn's error, named.
func TestSpawnFailure(t *testing.T) {
	for _, processes := range []bool{false, true} {
		t.Run(fmt.Sprintf("processes=%v", processes), func(t *testing.T) {
			t.Setenv("XLADDP_TEST_DIR", t.TempDir())
			t.Setenv(spawnScenarioEnv, "train")
			t.Setenv("XLADDP_TEST_SPAWN_FAIL", "1")
			err := ddp.Spawn(t.Context(), spawnTrain, ddp.SpawnOptions{Devices: 2, Processes: processes,
				Device: backend.Options{Target: backend.CPU}, Command: []string{os.Args[0], "-test.run=^$"}})
			require.Error(t, err)
			if processes {
				assert.ErrorContains(t, err, "process 1")
			} else {
				assert.ErrorContains(t, err, "rank 1 was told to fail")
			}
		})
	}
	err := ddp.Spawn(t.Context(), nil, ddp.SpawnOptions{})
	assert.ErrorContains(t, err, "nil function")
	err = ddp.Spawn(t.Context(), spawnTrain, ddp.SpawnOptions{Devices: -1})
	assert.ErrorContains(t, err, "cannot be negative")
	t.Setenv("NEURON_NUM_DEVICES", "two")
	err = ddp.Spawn(t.Context(), spawnTrain, ddp.SpawnOptions{})
	assert.ErrorContains(t, err, "$NEURON_NUM_DEVICES")
}

// TestSpawnCancelled: ending Spawn's ctx while its processes run stops
// them (none is left) and returns promptly with the cause.
func TestSpawnCancelled(t *testing.T) {
	mark := fmt.Sprintf("spawn-cancel-%d", os.Getpid())
	t.Setenv("XLADDP_TEST_DIR", t.TempDir())
	t.Setenv(spawnScenarioEnv, "train")
	t.Setenv("XLADDP_TEST_SPAWN_HANG", "1")
	t.Setenv("XLADDP_TEST_SPAWN_MARK", mark)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	err := ddp.Spawn(ctx, spawnTrain, ddp.SpawnOptions{Devices: 2, Processes: true,
		Device: backend.Options{Target: backend.CPU}, Command: []string{os.Args[0], "-test.run=^$"}})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 6*time.Second)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(env, []byte("XLADDP_TEST_SPAWN_MARK="+mark+"\x00")) {
			t.Errorf("spawned process %s survived", e.Name())
		}
	}
}

// TestSpawnChildReturnsUnlessAskedToExit: in a process Spawn started,
// Spawn returns fn's outcome to its caller unless SpawnOptions.ExitChild
// asks it to end the process (the init above exits after writing what
// its Spawn returned).
func TestSpawnChildReturnsUnlessAskedToExit(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("XLADDP_TEST_DIR", dir)
			t.Setenv(spawnScenarioEnv, "return")
			if fail {
				t.Setenv("XLADDP_TEST_SPAWN_FAIL", "1")
			}
			require.NoError(t, ddp.Spawn(t.Context(), spawnTrain, ddp.SpawnOptions{Devices: 2, Processes: true,
				Device: backend.Options{Target: backend.CPU}, Command: []string{os.Args[0], "-test.run=^$"}}),
				"the children exit 0 themselves after Spawn returned")
			assert.False(t, ddp.SpawnedChild())
			for r := range 2 {
				b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("returned%d", r)))
				require.NoError(t, err, "rank %d's Spawn did not return", r)
				if fail && r == 1 {
					assert.Contains(t, string(b), "returned ddp: Spawn: rank 1")
				} else if !fail {
					assert.Equal(t, "returned <nil>", string(b))
				}
			}
		})
	}
}
