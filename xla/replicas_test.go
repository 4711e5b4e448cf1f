package xla

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCollectivesAcrossFourReplicas checks AllReduce (every op),
// AllGather and ReduceScatter against host references computed in float64.
// Tolerance 1e-6 relative for sums, means and products; min/max/gather exact.
func TestCollectivesAcrossFourReplicas(t *testing.T) {
	const n, rows, cols = 4, 4, 3
	eng := newEngine(t, n)
	inputs := make([][]float32, n)
	rng := rand.New(rand.NewPCG(3, 4))
	for r := range inputs {
		inputs[r] = make([]float32, rows*cols)
		for i := range inputs[r] {
			inputs[r][i] = float32(rng.NormFloat64())
		}
	}
	reduceRef := func(combine func(a, b float64) float64) []float64 {
		out := toFloat64(inputs[0])
		for r := 1; r < n; r++ {
			for i := range out {
				out[i] = combine(out[i], float64(inputs[r][i]))
			}
		}
		return out
	}
	sum := reduceRef(func(a, b float64) float64 { return a + b })
	mean := make([]float64, len(sum))
	for i := range sum {
		mean[i] = sum[i] / n
	}
	want := map[ReduceOp][]float64{
		ReduceSum: sum, ReduceMean: mean,
		ReduceMin:     reduceRef(math.Min),
		ReduceMax:     reduceRef(math.Max),
		ReduceProduct: reduceRef(func(a, b float64) float64 { return a * b }),
	}
	results := make([]map[string][]float32, n)
	err := eng.RunReplicas(testContext(t), n, func(ctx context.Context, r Replica) error {
		x := mustFromSlice(t, r.Device(), inputs[r.Index()], rows, cols)
		outs := map[string]*Tensor{
			"gather0":  AllGather(x, 0),
			"gather1":  AllGather(x, 1),
			"scatter0": ReduceScatter(x, ReduceSum, 0),
		}
		// A fixed order: ranging over the map would trace a different program per replica.
		for _, op := range []ReduceOp{ReduceSum, ReduceMean, ReduceMin, ReduceMax, ReduceProduct} {
			outs[op.String()] = AllReduce(x, op)
		}
		if err := r.MarkStep(ctx); err != nil {
			return err
		}
		results[r.Index()] = map[string][]float32{}
		for name, o := range outs {
			v, err := o.Float32s(ctx)
			if err != nil {
				return err
			}
			results[r.Index()][name] = v
		}
		return nil
	})
	require.NoError(t, err)
	for r := range n {
		for op, ref := range want {
			got := toFloat64(results[r][op.String()])
			for i := range ref {
				assert.InDelta(t, ref[i], got[i], 1e-6*math.Max(1, math.Abs(ref[i])), "replica %d %s[%d]", r, op, i)
			}
		}
		var gather0, gather1 []float32
		for q := range n {
			gather0 = append(gather0, inputs[q]...)
		}
		for i := range rows {
			for q := range n {
				gather1 = append(gather1, inputs[q][i*cols:(i+1)*cols]...)
			}
		}
		assert.Equal(t, gather0, results[r]["gather0"], "replica %d AllGather axis 0", r)
		assert.Equal(t, gather1, results[r]["gather1"], "replica %d AllGather axis 1", r)
		part := rows / n
		assert.InDeltaSlice(t, sum[r*part*cols:(r+1)*part*cols], toFloat64(results[r]["scatter0"]), 1e-5,
			"replica %d ReduceScatter", r)
	}
}

// runFailing runs fn on n replicas and returns RunReplicas' error and how
// long it took, failing the test if it took 1 s or more.
func runFailing(t *testing.T, n int, fn func(ctx context.Context, r Replica) error) error {
	t.Helper()
	eng := newEngine(t, n)
	start := time.Now()
	err := eng.RunReplicas(testContext(t), n, fn)
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.Less(t, elapsed, time.Second, "every replica must end within 1 s")
	return err
}

func TestReplicaFailures(t *testing.T) {
	const n = 3
	// step records the same small program on every replica.
	step := func(t *testing.T, r Replica) *Tensor {
		x := mustFromSlice(t, r.Device(), []float32{1, 2}, 2)
		return AllReduce(x.MulScalar(2), ReduceSum)
	}
	tests := []struct {
		name    string
		fn      func(t *testing.T) func(ctx context.Context, r Replica) error
		wantIs  error
		wantMsg []string
	}{
		{
			name: "diverged trace",
			fn: func(t *testing.T) func(ctx context.Context, r Replica) error {
				return func(ctx context.Context, r Replica) error {
					y := step(t, r)
					if r.Index() == 1 {
						y = y.Exp()
					}
					err := r.MarkStep(ctx)
					runtime.KeepAlive(y) // y is live at MarkStep, so it is an output
					return err
				}
			},
			wantIs: ErrReplicaMismatch,
			wantMsg: []string{"replicas traced 2 different programs (replica groups [0 2] vs [1])",
				"replica 0 vs replica 1", "exp("},
		},
		{
			name: "one replica returns an error",
			fn: func(t *testing.T) func(ctx context.Context, r Replica) error {
				return func(ctx context.Context, r Replica) error {
					for s := 0; ; s++ {
						if r.Index() == 2 && s == 3 {
							return errors.New("data file missing")
						}
						_ = step(t, r)
						if err := r.MarkStep(ctx); err != nil {
							return err
						}
					}
				}
			},
			wantMsg: []string{"replica 2: data file missing"},
		},
		{
			name: "one replica panics",
			fn: func(t *testing.T) func(ctx context.Context, r Replica) error {
				return func(ctx context.Context, r Replica) error {
					if r.Index() == 0 {
						panic("index out of range in user code")
					}
					_ = step(t, r)
					return r.MarkStep(ctx)
				}
			},
			wantMsg: []string{"replica 0 panicked: index out of range in user code"},
		},
		{
			name: "one replica stops early",
			fn: func(t *testing.T) func(ctx context.Context, r Replica) error {
				return func(ctx context.Context, r Replica) error {
					steps := 5
					if r.Index() == 1 {
						steps = 2
					}
					for range steps {
						_ = step(t, r)
						if err := r.MarkStep(ctx); err != nil {
							return err
						}
					}
					return nil
				}
			},
			wantMsg: []string{"replicas [1] returned while replicas", "every replica must run the same number of steps"},
		},
		{
			name: "shape error in one replica's trace",
			fn: func(t *testing.T) func(ctx context.Context, r Replica) error {
				return func(ctx context.Context, r Replica) error {
					y := step(t, r)
					if r.Index() == 1 {
						y = y.MatMul(y)
					}
					err := r.MarkStep(ctx)
					runtime.KeepAlive(y)
					return err
				}
			},
			wantMsg: []string{"replica 1: xla: MatMul: needs rank >= 1 x rank >= 2, got (Float32)[2] x (Float32)[2]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := runFailing(t, n, tt.fn(t))
			if tt.wantIs != nil {
				assert.ErrorIs(t, err, tt.wantIs)
			}
			for _, msg := range tt.wantMsg {
				assert.Contains(t, err.Error(), msg)
			}
			assert.NotRegexp(t, `replica \d+:? (panicked: )?replica \d+`, err.Error(), "a replica is named once")
		})
	}
}

// slowToCompile records a program of many distinct ops, so its compilation
// takes long enough for a waiting replica's deadline to pass meanwhile.
func slowToCompile(t *testing.T, d *Device) *Tensor {
	x := mustFromSlice(t, d, make([]float32, 64*64), 64, 64)
	for i := range 800 {
		x = x.MatMul(x).MulScalar(1.0 / float64(i+2)).Tanh()
	}
	return x
}

// TestMarkStepHonoursContext: ctx and the replica timeout bound every wait
// in MarkStep. A replica whose deadline passes while another replica
// compiles the shared step leaves at its deadline (the step used to hold
// the group lock, so it left at the end of the compilation, broke the
// group and blamed the wrong replicas). A cancelled ctx runs nothing.
func TestMarkStepHonoursContext(t *testing.T) {
	t.Run("deadline while the step compiles", func(t *testing.T) {
		eng := newEngine(t, 2)
		const deadline = 100 * time.Millisecond
		var left time.Duration
		var leftErr error
		waiting := make(chan struct{})
		err := eng.RunReplicas(testContext(t), 2, func(ctx context.Context, r Replica) error {
			y := slowToCompile(t, r.Device())
			if r.Index() == 1 {
				ctx, cancel := context.WithTimeout(ctx, deadline)
				defer cancel()
				close(waiting)
				start := time.Now()
				leftErr = r.MarkStep(ctx)
				left = time.Since(start)
				runtime.KeepAlive(y)
				return leftErr
			}
			// Replica 0 arrives last and compiles: after replica 1 built its
			// graph (however slowly a loaded machine does), and a moment.
			<-waiting
			time.Sleep(50 * time.Millisecond)
			err := r.MarkStep(ctx)
			runtime.KeepAlive(y)
			return err
		})
		require.Error(t, err)
		assert.ErrorIs(t, leftErr, context.DeadlineExceeded)
		assert.Less(t, left, deadline+300*time.Millisecond, "replica 1 leaves at its deadline, not after the compilation (about 1 s)")
		assert.Contains(t, leftErr.Error(), "replica 1 stopped waiting in MarkStep (step 0) while the step of all 2 replicas was compiling or executing")
		assert.Contains(t, err.Error(), "replica 1 stopped waiting")
	})
	t.Run("already cancelled", func(t *testing.T) {
		eng := newEngine(t, 1)
		d := eng.Device(0)
		y := mustFromSlice(t, d, []float32{1, 2}, 2).MulScalar(3)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		before := GetMetrics().Executions
		err := d.MarkStep(ctx)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, before, GetMetrics().Executions, "nothing runs")
		assert.True(t, y.IsPending(), "the trace stays pending for the next MarkStep")
		got, err := y.Float32s(testContext(t))
		require.NoError(t, err, "the device stays usable")
		assert.Equal(t, []float32{3, 6}, got)
	})
	t.Run("replica timeout names the missing replica", func(t *testing.T) {
		eng := newEngine(t, 2)
		require.NoError(t, eng.SetReplicaTimeout(100*time.Millisecond))
		assert.Error(t, eng.SetReplicaTimeout(0))
		start := time.Now()
		err := eng.RunReplicas(context.Background(), 2, func(ctx context.Context, r Replica) error {
			if r.Index() == 1 {
				select { // stuck in user code, never reaching MarkStep
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(5 * time.Second):
					return nil
				}
			}
			_ = r.Device().Ones(Float32, 2).AddScalar(2)
			return r.MarkStep(ctx)
		})
		require.Error(t, err)
		assert.Less(t, time.Since(start), 2*time.Second)
		assert.Contains(t, err.Error(), "replica 0 stopped waiting in MarkStep (step 0) for replicas [1]: replica timeout 100ms passed")
	})
}

func TestRunReplicasBadCount(t *testing.T) {
	eng := newEngine(t, 2)
	for _, n := range []int{0, 3} {
		err := eng.RunReplicas(context.Background(), n, func(context.Context, Replica) error { return nil })
		require.Error(t, err)
		assert.Contains(t, err.Error(), fmt.Sprintf("RunReplicas(%d): the engine has 2 device(s)", n))
	}
}
