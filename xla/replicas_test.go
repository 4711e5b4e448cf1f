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
		})
	}
}

func TestRunReplicasBadCount(t *testing.T) {
	eng := newEngine(t, 2)
	for _, n := range []int{0, 3} {
		err := eng.RunReplicas(context.Background(), n, func(context.Context, Replica) error { return nil })
		require.Error(t, err)
		assert.Contains(t, err.Error(), fmt.Sprintf("RunReplicas(%d): the engine has 2 device(s)", n))
	}
}
