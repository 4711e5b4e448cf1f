//go:build mpi

package ddp_test

import (
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/ddp/internal/workertest"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestMPIWrapEqualsSingleDevice: the DDP wrapper, unchanged, trains on
// the mpi backend to the parameters single-device training on the global
// batch reaches (1e-5 relative), every replica bit-identical; with one
// bucket per gradient, the bucket all-reduces run as MPI_Iallreduce.
func TestMPIWrapEqualsSingleDevice(t *testing.T) {
	e := xlatest.NewEngine(t, 1)
	ctx := xlatest.Context(t)
	d := e.Device(0)
	for _, c := range []struct {
		kind                      string
		processes, devices, micro int
		wrap                      string
	}{{"toy", 2, 2, 1, ""}, {"toy", 4, 1, 1, "bucket=0.00001"}, {"cnn", 2, 1, 1, ""}, {"toy", 2, 1, 4, ""}} {
		t.Run(fmt.Sprintf("%s/%dx%d/micro%d/%s", c.kind, c.processes, c.devices, c.micro, c.wrap), func(t *testing.T) {
			shards := ddptest.Split(0, ddptest.GlobalRows, 1)
			if c.kind == "cnn" {
				shards = ddptest.Split(0, ddptest.GlobalRows, c.processes*c.devices)
			}
			want, err := ddptest.TrainModel(ctx, d, ddptest.Run{Kind: c.kind, Seed: 100, Steps: ddptest.EquivalenceSteps, Shards: shards,
				Mark: func() error { return d.MarkStep(ctx) }})
			require.NoError(t, err)
			res := workertest.MPIRun(t, 3*time.Minute, "equivalence", c.processes, nil, "XLADDP_TEST_TIMEOUT=60s", "XLADDP_TEST_MODEL="+c.kind,
				"XLADDP_TEST_WRAP="+c.wrap, "XLADDP_TEST_DEVICES="+strconv.Itoa(c.devices), "XLADDP_TEST_MICRO="+strconv.Itoa(c.micro))
			require.NoError(t, res.Err, "%s", res.Output)
			first := ""
			for r, rep := range res.Reps {
				require.NotNil(t, rep, "rank %d: %s", r, res.Output)
				require.Empty(t, rep.Error, "rank %d", r)
				if c.micro > 1 { // one all-reduce and one random-state all-gather per 4 micro-batches (and 3 set-up collectives)
					assert.EqualValues(t, ddptest.EquivalenceSteps, rep.Counters["gradient syncs"], "rank %d", r)
					assert.EqualValues(t, 2*ddptest.EquivalenceSteps+3, rep.Counters["collectives"], "rank %d", r)
				}
				delete(rep.Hashes, "step traces")
				for replica, h := range rep.Hashes {
					if first == "" {
						first = h
					}
					assert.Equal(t, first, h, "%s differs", replica)
				}
			}
			got := res.Reps[0].Params
			require.Len(t, got, len(want))
			for i := range want {
				require.Len(t, got[i], len(want[i]))
				for j := range want[i] {
					assert.InDelta(t, want[i][j], got[i][j], 1e-5*math.Max(1, math.Abs(float64(want[i][j]))), "parameter %d[%d]", i, j)
				}
			}
		})
	}
}

// TestMPIWrapHostile: the wrapper's misuse cases that every rank reaches
// fail on the mpi backend as on TCP, the layouts compared by gathering
// them (the mpi backend has no store).
func TestMPIWrapHostile(t *testing.T) {
	for _, c := range []struct {
		name string
		want [2]string
	}{
		{"branch-by-rank", [2]string{
			"gradient 2 is mid.weight Float32[10 10] on rank 0 but l2.weight Float32[5 10] on rank 1",
			"gradient 2 is l2.weight Float32[5 10] on rank 1 but mid.weight Float32[10 10] on rank 0"}},
		{"different-models", [2]string{"ranks called different collectives", "ranks called different collectives"}},
		{"compiled", [2]string{"train with lazy steps (MarkStep) across processes", "train with lazy steps (MarkStep) across processes"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := workertest.MPIRun(t, 3*time.Minute, "wrap-hostile", 2, nil, "XLADDP_TEST_TIMEOUT=60s", "XLADDP_TEST_CASE="+c.name)
			require.NoError(t, res.Err, "%s", res.Output)
			for r, rep := range res.Reps {
				require.NotNil(t, rep, "rank %d: %s", r, res.Output)
				require.Empty(t, rep.Error, "rank %d", r)
				require.Len(t, rep.Errors, 1, "rank %d: no error", r)
				assert.Contains(t, rep.Errors[0], c.want[r], "rank %d", r)
			}
		})
	}
}
