package xla

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Neuron DDP tutorial's toy model: Linear 10→10, ReLU, Linear 10→5, MSE,
// SGD lr 0.001, batch 20, 100 steps.
const (
	toyIn, toyHidden, toyOut = 10, 10, 5
	toyBatch, toySteps       = 20, 100
	toyLR                    = 0.001
)

// toyInit returns the host parameters, torch's default Linear init
// (uniform ±1/sqrt(fan_in)), stored [in, out].
func toyInit(seed uint64) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	uniform := func(n, fanIn int) []float32 {
		bound := 1 / math.Sqrt(float64(fanIn))
		out := make([]float32, n)
		for i := range out {
			out[i] = float32((rng.Float64()*2 - 1) * bound)
		}
		return out
	}
	return [][]float32{
		uniform(toyIn*toyHidden, toyIn), uniform(toyHidden, toyIn),
		uniform(toyHidden*toyOut, toyHidden), uniform(toyOut, toyHidden),
	}
}

func toyBatchData(seed uint64) (x, y []float32) {
	rng := rand.New(rand.NewPCG(seed, 2))
	x = make([]float32, toyBatch*toyIn)
	y = make([]float32, toyBatch*toyOut)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range y {
		y[i] = float32(rng.NormFloat64())
	}
	return x, y
}

var toyDims = [][]int{{toyIn, toyHidden}, {toyHidden}, {toyHidden, toyOut}, {toyOut}}

// toyReplica uploads the initial parameters (marked RequiresGrad) and this
// replica's batch to d.
func toyReplica(d *Device, initial [][]float32, replica int) (params []*Tensor, x, y *Tensor, err error) {
	params = make([]*Tensor, len(initial))
	for i := range params {
		if params[i], err = FromSlice(d, initial[i], toyDims[i]...); err != nil {
			return nil, nil, nil, err
		}
		if err = params[i].SetRequiresGrad(true); err != nil {
			return nil, nil, nil, err
		}
	}
	xs, ys := toyBatchData(uint64(100 + replica))
	if x, err = FromSlice(d, xs, toyBatch, toyIn); err != nil {
		return nil, nil, nil, err
	}
	y, err = FromSlice(d, ys, toyBatch, toyOut)
	return params, x, y, err
}

// toyStep records one training step: forward, backward, gradients averaged
// across replicas in-graph, SGD. It returns the (pending) loss.
func toyStep(params []*Tensor, x, y *Tensor) (*Tensor, error) {
	out := x.MatMul(params[0]).Add(params[1]).Relu().MatMul(params[2]).Add(params[3])
	loss := out.Sub(y).Square().Mean()
	if err := loss.Backward(); err != nil {
		return nil, err
	}
	for _, p := range params {
		if err := p.Assign(p.Sub(AllReduce(p.Grad(), ReduceMean).MulScalar(toyLR))); err != nil {
			return nil, err
		}
		p.ZeroGrad()
	}
	return loss, nil
}

// TestToyModelTwoReplicas trains the toy model on 2 CPU replicas, each on
// its own batch, with gradients averaged by an in-graph all-reduce, and
// checks it against an independent float64 host run of the same training:
// every step's loss within 1e-4 relative, final parameters within 1e-5.
// It also asserts nothing executes before the first MarkStep and that the
// 100 steps compile exactly once.
func TestToyModelTwoReplicas(t *testing.T) {
	const replicas = 2
	eng := newEngine(t, replicas)
	ctx := testContext(t)
	initial := toyInit(7)
	losses := make([][]float64, replicas)
	finals := make([][][]float32, replicas)

	ResetMetrics()
	err := eng.RunReplicas(ctx, replicas, func(ctx context.Context, r Replica) error {
		params, x, y, err := toyReplica(r.Device(), initial, r.Index())
		if err != nil {
			return err
		}
		for step := range toySteps {
			loss, err := toyStep(params, x, y)
			if err != nil {
				return err
			}
			if step == 0 {
				assert.Zero(t, GetMetrics().Executions, "nothing may execute before the first MarkStep")
			}
			if err := r.MarkStep(ctx); err != nil {
				return err
			}
			v, err := loss.Item(ctx)
			if err != nil {
				return err
			}
			losses[r.Index()] = append(losses[r.Index()], v)
		}
		for _, p := range params {
			vals, err := p.Float32s(ctx)
			if err != nil {
				return err
			}
			finals[r.Index()] = append(finals[r.Index()], vals)
		}
		return nil
	})
	require.NoError(t, err)

	m := GetMetrics()
	assert.EqualValues(t, 1, m.Compilations, "a fixed-shape loop compiles once")
	assert.EqualValues(t, toySteps-1, m.CacheHits)
	assert.EqualValues(t, toySteps, m.Executions)

	refLosses, refParams := toyReference(initial, replicas)
	for r := range replicas {
		require.Len(t, losses[r], toySteps)
		for s := range toySteps {
			assert.InEpsilon(t, refLosses[r][s], losses[r][s], 1e-4, "replica %d step %d", r, s)
		}
		for i := range refParams {
			assert.InDeltaSlice(t, refParams[i], toFloat64(finals[r][i]), 1e-5, "replica %d param %d", r, i)
		}
	}
	mean := func(s int) float64 { return (losses[0][s] + losses[1][s]) / 2 }
	assert.Less(t, mean(toySteps-1), mean(0), "the loss decreases")
	for i := range finals[0] {
		assert.Equal(t, finals[0][i], finals[1][i], "DDP keeps replicas' parameters identical (param %d)", i)
	}
}

// toyReference trains the toy model in float64 on the host: closed-form
// gradients of MSE through Linear-ReLU-Linear, averaged over replicas.
func toyReference(initial [][]float32, replicas int) (losses [][]float64, params [][]float64) {
	params = make([][]float64, len(initial))
	for i, p := range initial {
		params[i] = toFloat64(p)
	}
	xs := make([][]float64, replicas)
	ys := make([][]float64, replicas)
	for r := range replicas {
		x, y := toyBatchData(uint64(100 + r))
		xs[r], ys[r] = toFloat64(x), toFloat64(y)
	}
	losses = make([][]float64, replicas)
	for range toySteps {
		sum := make([][]float64, len(params))
		for i := range sum {
			sum[i] = make([]float64, len(params[i]))
		}
		for r := range replicas {
			loss, grads := toyLossAndGrads(params, xs[r], ys[r])
			losses[r] = append(losses[r], loss)
			for i := range grads {
				for j := range grads[i] {
					sum[i][j] += grads[i][j] / float64(replicas)
				}
			}
		}
		for i := range params {
			for j := range params[i] {
				params[i][j] -= toyLR * sum[i][j]
			}
		}
	}
	return losses, params
}

func toyLossAndGrads(p [][]float64, x, y []float64) (float64, [][]float64) {
	w1, b1, w2, b2 := p[0], p[1], p[2], p[3]
	h := make([]float64, toyBatch*toyHidden)
	for n := range toyBatch {
		for j := range toyHidden {
			s := b1[j]
			for i := range toyIn {
				s += x[n*toyIn+i] * w1[i*toyHidden+j]
			}
			h[n*toyHidden+j] = math.Max(s, 0)
		}
	}
	count := float64(toyBatch * toyOut)
	var loss float64
	dOut := make([]float64, toyBatch*toyOut)
	for n := range toyBatch {
		for k := range toyOut {
			s := b2[k]
			for j := range toyHidden {
				s += h[n*toyHidden+j] * w2[j*toyOut+k]
			}
			diff := s - y[n*toyOut+k]
			loss += diff * diff / count
			dOut[n*toyOut+k] = 2 * diff / count
		}
	}
	g := [][]float64{make([]float64, len(w1)), make([]float64, len(b1)), make([]float64, len(w2)), make([]float64, len(b2))}
	for n := range toyBatch {
		for k := range toyOut {
			d := dOut[n*toyOut+k]
			g[3][k] += d
			for j := range toyHidden {
				g[2][j*toyOut+k] += h[n*toyHidden+j] * d
			}
		}
		for j := range toyHidden {
			if h[n*toyHidden+j] <= 0 {
				continue
			}
			var dh float64
			for k := range toyOut {
				dh += dOut[n*toyOut+k] * w2[j*toyOut+k]
			}
			g[1][j] += dh
			for i := range toyIn {
				g[0][i*toyHidden+j] += x[n*toyIn+i] * dh
			}
		}
	}
	return loss, g
}
