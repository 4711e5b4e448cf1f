package ddp_test

import (
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// TestWrapEqualsSingleDevice is the key property: with fixed seeds,
// training 20 steps on a global batch split over 4 replicas, in every
// layout (processes × local devices), gives the parameters single-device
// training on the global batch gives, within 1e-5 relative, and every
// replica's are bit-identical. Processes meet over loopback.
//
// The CNN's BatchNorm normalizes each replica's shard by its own
// statistics, as torch's DDP does, so its single-device reference
// accumulates the gradients of the 4 shards (ghost batches): the same
// global-batch gradient with per-shard batch statistics.
func TestWrapEqualsSingleDevice(t *testing.T) {
	runEquivalence(t, []equivalenceCase{
		{kind: "toy", processes: 1, devices: 4, micro: 1},
		{kind: "toy", processes: 2, devices: 2, micro: 1},
		{kind: "cnn", processes: 1, devices: 4, micro: 1},
		{kind: "cnn", processes: 4, devices: 1, micro: 1},
		{kind: "toy", processes: 1, devices: 4, micro: 4},    // NoSync over 4 micro-batches, local
		{kind: "branch", processes: 1, devices: 4, micro: 1}, // FindUnusedParameters: a layer skipped on odd steps
		// One bucket per gradient, down to 20 bytes.
		{kind: "toy", processes: 2, devices: 2, micro: 1, wrap: "bucket=0.00001"},
		// 2 MiB of gradients: the first bucket (1 MiB) then the rest;
		// in place in shared memory with GradientAsBucketView, staged
		// without; the ring over TCP when shared memory is off.
		{kind: "wide", processes: 2, devices: 2, micro: 1, wrap: "view", sharedMemory: true},
		{kind: "wide", processes: 2, devices: 1, micro: 1, sharedMemory: true},
		// Compiled steps: forward+backward, SyncGradients, update.
		{kind: "toy", processes: 1, devices: 4, micro: 1, wrap: "compiled"},
		{kind: "toy", processes: 2, devices: 2, micro: 1, wrap: "compiled"},
		// The GPT (AdamW groups, clipping, warmup+cosine) at 3
		// processes; TestLongWrapEqualsSingleDeviceGPT has the other
		// layouts (local replicas, 2 and 4 micro-batches); the mpi tests
		// accumulate the toy's.
		{kind: "gpt", processes: 3, devices: 1, micro: 1},
	})
}

// TestLongWrapEqualsSingleDeviceLayouts: the layouts TestWrapEqualsSingleDevice
// covers by another model, and the cases it leaves to make test-long for
// make test's time.
func TestLongWrapEqualsSingleDeviceLayouts(t *testing.T) {
	runEquivalence(t, []equivalenceCase{
		{kind: "toy", processes: 4, devices: 1, micro: 1},
		{kind: "cnn", processes: 2, devices: 2, micro: 1},
		{kind: "branch", processes: 2, devices: 2, micro: 1},
		{kind: "wide", processes: 4, devices: 1, micro: 1, sharedMemory: true},
		{kind: "toy", processes: 2, devices: 2, micro: 4}, // NoSync across processes
		{kind: "wide", processes: 2, devices: 1, micro: 1, wrap: "shm-off"},
		{kind: "cnn", processes: 4, devices: 1, micro: 1, wrap: "compiled"},
	})
}

// TestLongWrapEqualsSingleDeviceGPT: the GPT's other layouts, 2 and 3 local
// replicas and 2 processes, with and without accumulation.
func TestLongWrapEqualsSingleDeviceGPT(t *testing.T) {
	runEquivalence(t, []equivalenceCase{
		{kind: "gpt", processes: 1, devices: 2, micro: 1},
		{kind: "gpt", processes: 1, devices: 2, micro: 2},
		{kind: "gpt", processes: 1, devices: 3, micro: 4},
		{kind: "gpt", processes: 2, devices: 1, micro: 4},
		{kind: "gpt", processes: 3, devices: 1, micro: 4},
	})
}

// equivalenceCase is one layout TestWrapEqualsSingleDevice trains.
type equivalenceCase struct {
	kind                      string
	processes, devices, micro int
	// wrap lists Wrap's options: "view" (GradientAsBucketView),
	// "bucket=MB" (BucketCapMB); "shm-off" turns shared memory off.
	wrap string
	// sharedMemory: the all-reduces must take the shared-memory path.
	sharedMemory bool
}

// runEquivalence trains each case's layout and compares it with the
// single-device reference of its model.
func runEquivalence(t *testing.T, cases []equivalenceCase) {
	e := xlatest.NewEngine(t, 1)
	ctx := xlatest.Context(t)
	d := e.Device(0)
	references := map[string][][]float32{}
	for _, c := range cases {
		kind := c.kind
		if references[kind] != nil {
			continue
		}
		shards := ddptest.Split(0, ddptest.GlobalRows, 1)
		if kind == "cnn" {
			shards = ddptest.Split(0, ddptest.GlobalRows, 4)
		}
		want, err := ddptest.TrainModel(ctx, d, ddptest.Run{Kind: kind, Seed: 100, Steps: ddptest.EquivalenceSteps, Shards: shards,
			Mark: func() error { return d.MarkStep(ctx) }})
		require.NoError(t, err, kind)
		references[kind] = want
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s/%dx%d/micro%d/%s", c.kind, c.processes, c.devices, c.micro, c.wrap)
		t.Run(name, func(t *testing.T) {
			env := []string{"XLADDP_TEST_TIMEOUT=60s", "XLADDP_TEST_MODEL=" + c.kind, "XLADDP_TEST_WRAP=" + c.wrap,
				"XLADDP_TEST_DEVICES=" + strconv.Itoa(c.devices), "XLADDP_TEST_MICRO=" + strconv.Itoa(c.micro)}
			if c.wrap == "shm-off" {
				env = append(env, dist.EnvShmMiB+"=0")
			}
			cmds, outs := ddptest.Launch(t, "equivalence", c.processes, env...)
			reps := ddptest.WaitReports(t, cmds, outs)
			var first string
			for r, rep := range reps {
				require.Empty(t, rep.Error, "rank %d", r)
				if c.wrap == "compiled" {
					// Two steps traced once per replica: the other 19 Runs replay.
					assert.Equal(t, strconv.Itoa(2*c.devices), rep.Hashes["step traces"], "rank %d", r)
				}
				delete(rep.Hashes, "step traces")
				if c.sharedMemory {
					assert.Positive(t, rep.SharedMemoryAllReduces, "rank %d: no all-reduce took shared memory", r)
				}
				for replica, h := range rep.Hashes {
					if first == "" {
						first = h
					}
					assert.Equal(t, first, h, "%s differs from replica 0", replica)
				}
			}
			if c.kind == "gpt" {
				// One gradient average per step, however many micro-batches:
				// in-graph, one all-reduce per parameter (16) per step; across
				// processes one bucket all-reduce per step and the
				// all-gather of the replicas' random states before it,
				// besides Wrap's parameter layout check and broadcast and the
				// first step's gradient layout check.
				for r, rep := range reps {
					assert.EqualValues(t, ddptest.EquivalenceSteps, rep.Counters["gradient syncs"], "rank %d", r)
					wantInGraph, wantCollectives := int64(0), int64(0)
					if c.devices > 1 {
						wantInGraph = 16 * ddptest.EquivalenceSteps
					}
					if c.processes > 1 {
						wantCollectives = 2*ddptest.EquivalenceSteps + 3
					}
					assert.Equal(t, wantInGraph, rep.Counters["in-graph all-reduces"], "rank %d", r)
					assert.Equal(t, wantCollectives, rep.Counters["collectives"], "rank %d", r)
				}
			}
			want, got := references[c.kind], reps[0].Params
			if c.kind == "toy" && c.processes > 1 {
				// Host traffic is one copy of the gradients per process
				// and step, whatever its local replica count, and every
				// replica's random state (24 bytes) per step; besides,
				// rank 0 sends the initial weights and every replica
				// reads its final ones.
				bytes := int64(4 * (10*10 + 10 + 10*5 + 5))
				rng := int64(ddptest.EquivalenceSteps * c.devices * 24)
				for r, rep := range reps {
					initial := int64(0)
					if r == 0 {
						initial = bytes
					}
					assert.Equal(t, ddptest.EquivalenceSteps*bytes+rng+initial+int64(c.devices)*bytes, rep.BytesToHost, "rank %d", r)
				}
			}
			require.Len(t, got, len(want))
			for i := range want {
				require.Len(t, got[i], len(want[i]))
				for j := range want[i] {
					tol := 1e-5 * math.Max(1, math.Abs(float64(want[i][j])))
					assert.InDelta(t, want[i][j], got[i][j], tol, "parameter %d[%d]", i, j)
				}
			}
		})
	}
}
