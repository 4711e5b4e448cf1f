package xla

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/xla/internal/progcache"
)

// childModeEnv makes the test binary run persistentCacheChild instead of tests.
const childModeEnv = "XLADDP_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childModeEnv) {
	case "persistent-cache":
		os.Exit(persistentCacheChild())
	case "convolutions":
		os.Exit(convolutionChild())
	}
	os.Exit(m.Run())
}

type childReport struct {
	Compilations, PersistentCacheHits, CacheHits int64
	Losses                                       []float64
}

// persistentCacheChild trains the toy model for 5 steps on 2 replicas and
// prints its metrics and replica 0's losses as JSON.
func persistentCacheChild() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := backend.Open(ctx, backend.Options{Target: backend.CPU, CPUDevices: 2})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer b.Close()
	eng := NewEngine(b)
	initial := toyInit(7)
	var losses []float64
	err = eng.RunReplicas(ctx, 2, func(ctx context.Context, r Replica) error {
		params, x, y, err := toyReplica(r.Device(), initial, r.Index())
		if err != nil {
			return err
		}
		for range 5 {
			loss, err := toyStep(params, x, y)
			if err != nil {
				return err
			}
			if err := r.MarkStep(ctx); err != nil {
				return err
			}
			v, err := loss.Item(ctx)
			if err != nil {
				return err
			}
			if r.Index() == 0 {
				losses = append(losses, v)
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	m := GetMetrics()
	out, _ := json.Marshal(childReport{m.Compilations, m.PersistentCacheHits, m.CacheHits, losses})
	fmt.Println(string(out))
	return 0
}

// TestPersistentCacheAcrossProcesses runs the same program in two
// processes sharing XLADDP_CACHE_DIR: the first compiles once and saves the
// program, the second loads it and compiles nothing, with the same losses.
// A corrupted cache file makes a third process recompile, not fail.
func TestPersistentCacheAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	run := func() childReport {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childModeEnv+"=persistent-cache", EnvCacheDir+"="+dir,
			"XLADDP_DEVICE=", "PJRT_DEVICE=", "XLADDP_CPU_DEVICES=", "CPU_NUM_DEVICES=")
		out, err := cmd.Output()
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		require.NoError(t, err, "child failed: %s", stderr)
		var rep childReport
		require.NoError(t, json.Unmarshal(out, &rep), "child output: %s", out)
		return rep
	}
	first := run()
	assert.EqualValues(t, 1, first.Compilations)
	assert.EqualValues(t, 0, first.PersistentCacheHits)
	files, err := filepath.Glob(filepath.Join(dir, "*.xlaexec"))
	require.NoError(t, err)
	require.Len(t, files, 1, "one program saved")

	second := run()
	assert.EqualValues(t, 0, second.Compilations, "the second process compiles nothing")
	assert.EqualValues(t, 1, second.PersistentCacheHits)
	assert.EqualValues(t, 4, second.CacheHits)
	assert.Equal(t, first.Losses, second.Losses, "the loaded program computes the same")

	require.NoError(t, os.WriteFile(files[0], []byte("XLADDPX1garbage"), 0o644))
	third := run()
	assert.EqualValues(t, 1, third.Compilations, "a corrupt cache file is recompiled")
	assert.Equal(t, first.Losses, third.Losses)
}

// runCacheChildren starts n children of persistentCacheChild at once on
// dir and returns their reports and stderr.
func runCacheChildren(t *testing.T, dir string, n int) ([]childReport, []string) {
	t.Helper()
	cmds := make([]*exec.Cmd, n)
	outs, errs := make([]strings.Builder, n), make([]strings.Builder, n)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^$")
		cmds[i].Env = append(os.Environ(), childModeEnv+"=persistent-cache", EnvCacheDir+"="+dir,
			"XLADDP_DEVICE=", "PJRT_DEVICE=", "XLADDP_CPU_DEVICES=", "CPU_NUM_DEVICES=", "XLADDP_DEBUG=")
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &errs[i]
		require.NoError(t, cmds[i].Start())
	}
	reps, stderr := make([]childReport, n), make([]string, n)
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "child %d: %s", i, errs[i].String())
		require.NoError(t, json.Unmarshal([]byte(outs[i].String()), &reps[i]), "child %d output: %s", i, outs[i].String())
		stderr[i] = errs[i].String()
	}
	return reps, stderr
}

// TestOneCompilationPerProgramAcrossProcesses: 4 processes sharing a cold
// cache directory compile the program once between them (the others wait
// for the entry's lock, then load it); a truncated entry or another
// program's file under its name is never used: one process recompiles
// and says why, the others load its result.
func TestOneCompilationPerProgramAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	sum := func(reps []childReport) (compiled, loaded int64) {
		for _, r := range reps {
			compiled += r.Compilations
			loaded += r.PersistentCacheHits
			assert.Equal(t, reps[0].Losses, r.Losses)
		}
		return compiled, loaded
	}
	reps, _ := runCacheChildren(t, dir, 4)
	compiled, loaded := sum(reps)
	assert.EqualValues(t, 1, compiled, "one compilation job-wide, not one per process")
	assert.EqualValues(t, 3, loaded)
	files, err := filepath.Glob(filepath.Join(dir, "*.xlaexec"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	good, err := os.ReadFile(files[0])
	require.NoError(t, err)

	for name, bad := range map[string][]byte{
		"truncated": good[:len(good)/2],
		"foreign":   foreignEntry(t, good),
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(files[0], bad, 0o644))
			reps, stderr := runCacheChildren(t, dir, 4)
			compiled, loaded := sum(reps)
			assert.EqualValues(t, 1, compiled, "the bad entry is compiled again, once")
			assert.EqualValues(t, 3, loaded)
			assert.Contains(t, strings.Join(stderr, "\n"), "compiling the program again")
		})
	}
}

// foreignEntry is a well-formed cache file of another program: good's
// header with another fingerprint.
func foreignEntry(t *testing.T, good []byte) []byte {
	t.Helper()
	h, exec, err := progcache.ParseFile(good)
	require.NoError(t, err)
	h.Fingerprint = strings.Repeat("0", len(h.Fingerprint))
	d := progcache.Disk{Dir: t.TempDir()}
	require.NoError(t, d.Store(h, exec))
	out, err := os.ReadFile(d.Path(h))
	require.NoError(t, err)
	return out
}
