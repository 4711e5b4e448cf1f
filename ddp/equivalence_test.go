package ddp

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp/dist"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/xlatest"
)

func init() { groupScenarios["equivalence"] = equivalenceScenario }

const equivalenceSteps = 20

// equivalenceScenario trains $XLADDP_TEST_MODEL on this rank's
// $XLADDP_TEST_DEVICES local replicas, each with its share of the global
// batch (in $XLADDP_TEST_MICRO micro-batches) and its own seed, and
// reports local replica 0's parameters and a hash of every replica's.
func equivalenceScenario(rep *report) {
	ctx := context.Background()
	kind := os.Getenv("XLADDP_TEST_MODEL")
	devices, _ := strconv.Atoi(os.Getenv("XLADDP_TEST_DEVICES"))
	micro, _ := strconv.Atoi(os.Getenv("XLADDP_TEST_MICRO"))
	var opts []WrapOption
	compiled, zero := false, false
	for _, o := range strings.Split(os.Getenv("XLADDP_TEST_WRAP"), ",") {
		switch {
		case o == "view":
			opts = append(opts, GradientAsBucketView())
		case o == "compiled":
			compiled = true
		case o == "zero":
			zero = true
		case strings.HasPrefix(o, "bucket="):
			mb, _ := strconv.ParseFloat(strings.TrimPrefix(o, "bucket="), 64)
			opts = append(opts, BucketCapMB(mb))
		}
	}
	e, done, err := joinJob(ctx, devices)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	defer done()
	steps := equivalenceSteps
	if s, err := strconv.Atoi(os.Getenv("XLADDP_TEST_STEPS")); err == nil {
		steps = s
	}
	params := make([][][]float32, devices)
	syncs := make([]int, devices)
	losses := make([][]float32, devices)
	collectivesBefore := dist.Default().Collectives()
	xla.ResetMetrics()
	err = e.RunReplicas(ctx, devices, func(ctx context.Context, r xla.Replica) error {
		replica, replicas := dist.Rank()*devices+r.Index(), dist.WorldSize()*devices
		rows := globalRows / replicas
		var err error
		run := trainRun{
			kind: kind, seed: 100 + uint64(replica), steps: steps,
			shards: split(replica*rows, (replica+1)*rows, micro), wrap: true, opts: opts, compiled: compiled,
			mark: func() error { return r.MarkStep(ctx) }, syncs: &syncs[r.Index()],
			optimizer: os.Getenv("XLADDP_TEST_OPTIM"), zero: zero,
		}
		if os.Getenv("XLADDP_TEST_LOSSES") != "" {
			// Every replica keeps its losses (they are outputs of the
			// programs every replica must trace alike); replica 0's are
			// reported.
			run.losses = &losses[r.Index()]
		}
		params[r.Index()], err = trainModel(ctx, r.Device(), run)
		return err
	})
	if err != nil {
		rep.Error = err.Error()
		return
	}
	rep.Params = params[0]
	rep.Losses = losses[0]
	rep.BytesToHost = xla.GetMetrics().BytesToHost
	rep.Counters = map[string]int64{"gradient syncs": int64(syncs[0]),
		"collectives": int64(dist.Default().Collectives() - collectivesBefore), "in-graph all-reduces": xla.GetMetrics().AllReduces}
	rep.Hashes["step traces"] = strconv.FormatInt(xla.GetMetrics().StepTraces, 10)
	rep.SharedMemoryAllReduces = dist.Default().SharedMemoryAllReduces()
	for i, p := range params {
		rep.Hashes[fmt.Sprintf("replica %d", dist.Rank()*devices+i)] = hashParams(p)
	}
}

func hashParams(params [][]float32) string {
	h := sha256.New()
	for _, p := range params {
		for _, v := range p {
			_ = binary.Write(h, binary.LittleEndian, v)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

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
		{kind: "toy", processes: 4, devices: 1, micro: 1},
		{kind: "toy", processes: 2, devices: 2, micro: 1},
		{kind: "cnn", processes: 1, devices: 4, micro: 1},
		{kind: "cnn", processes: 4, devices: 1, micro: 1},
		{kind: "cnn", processes: 2, devices: 2, micro: 1},
		{kind: "toy", processes: 1, devices: 4, micro: 4},    // NoSync over 4 micro-batches, local
		{kind: "toy", processes: 2, devices: 2, micro: 4},    // and across processes
		{kind: "branch", processes: 1, devices: 4, micro: 1}, // FindUnusedParameters: a layer skipped on odd steps
		{kind: "branch", processes: 2, devices: 2, micro: 1},
		// One bucket per gradient, down to 20 bytes.
		{kind: "toy", processes: 2, devices: 2, micro: 1, wrap: "bucket=0.00001"},
		// 2 MiB of gradients: the first bucket (1 MiB) then the rest;
		// in place in shared memory with GradientAsBucketView, staged
		// without; the ring over TCP when shared memory is off.
		{kind: "wide", processes: 2, devices: 2, micro: 1, wrap: "view", sharedMemory: true},
		{kind: "wide", processes: 4, devices: 1, micro: 1, sharedMemory: true},
		{kind: "wide", processes: 2, devices: 1, micro: 1, wrap: "shm-off"},
		// Compiled steps: forward+backward, SyncGradients, update.
		{kind: "toy", processes: 1, devices: 4, micro: 1, wrap: "compiled"},
		{kind: "toy", processes: 2, devices: 2, micro: 1, wrap: "compiled"},
		{kind: "cnn", processes: 4, devices: 1, micro: 1, wrap: "compiled"},
		// The GPT (AdamW groups, clipping, warmup+cosine) at 2 local
		// replicas with 2 accumulated micro-batches per step, and at 3
		// processes; TestLongWrapEqualsSingleDeviceGPT has the other
		// layouts (4 micro-batches); the mpi tests accumulate the toy's.
		{kind: "gpt", processes: 1, devices: 2, micro: 2},
		{kind: "gpt", processes: 3, devices: 1, micro: 1},
	})
}

// TestLongWrapEqualsSingleDeviceGPT: the GPT's other layouts, 3 local
// replicas and 2 processes, with and without accumulation.
func TestLongWrapEqualsSingleDeviceGPT(t *testing.T) {
	runEquivalence(t, []equivalenceCase{
		{kind: "gpt", processes: 1, devices: 2, micro: 1},
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
		shards := split(0, globalRows, 1)
		if kind == "cnn" {
			shards = split(0, globalRows, 4)
		}
		want, err := trainModel(ctx, d, trainRun{kind: kind, seed: 100, steps: equivalenceSteps, shards: shards,
			mark: func() error { return d.MarkStep(ctx) }})
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
			cmds, outs := launchJob(t, "equivalence", c.processes, env...)
			reps := waitReports(t, cmds, outs)
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
				// processes one bucket all-reduce per step, besides Wrap's
				// parameter layout check and broadcast and the first step's
				// gradient layout check.
				for r, rep := range reps {
					assert.EqualValues(t, equivalenceSteps, rep.Counters["gradient syncs"], "rank %d", r)
					wantInGraph, wantCollectives := int64(0), int64(0)
					if c.devices > 1 {
						wantInGraph = 16 * equivalenceSteps
					}
					if c.processes > 1 {
						wantCollectives = equivalenceSteps + 3
					}
					assert.Equal(t, wantInGraph, rep.Counters["in-graph all-reduces"], "rank %d", r)
					assert.Equal(t, wantCollectives, rep.Counters["collectives"], "rank %d", r)
				}
			}
			want, got := references[c.kind], reps[0].Params
			if c.kind == "toy" && c.processes > 1 {
				// Host traffic is one copy of the gradients per process
				// and step, whatever its local replica count; besides,
				// rank 0 sends the initial weights and every replica
				// reads its final ones.
				bytes := int64(4 * (10*10 + 10 + 10*5 + 5))
				for r, rep := range reps {
					initial := int64(0)
					if r == 0 {
						initial = bytes
					}
					assert.Equal(t, equivalenceSteps*bytes+initial+int64(c.devices)*bytes, rep.BytesToHost, "rank %d", r)
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
