package nn

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/xlatest"
)

// gptFixture is what testdata/gen_gpt_fixture.py recorded from torch 2.9.
type gptFixture struct {
	Config struct {
		Vocab, Block, Layers, Heads, Width int
	} `json:"config"`
	IDs       []int32  `json:"ids"`
	Targets   []int32  `json:"targets"`
	Batch     [2]int   `json:"batch"`
	StateDict [][3]any `json:"state_dict"`
	Exact     gptRun   `json:"exact"`
	Tanh      gptRun   `json:"tanh"`
}

type gptRun struct {
	Logits []float64            `json:"logits"`
	Loss   float64              `json:"loss"`
	Grads  map[string][]float64 `json:"grads"`
}

// gptFixtureValues is gen_gpt_fixture.py's formula for the k-th tensor.
func gptFixtureValues(name string, k int, dims []int) []float32 {
	n := 1
	for _, d := range dims {
		n *= d
	}
	out := make([]float32, n)
	for i := range out {
		base := (math.Mod(float64(i)*7919+float64(k)*104729, 1000) - 500) / 500
		var v float64
		switch {
		case len(dims) >= 2:
			v = base / math.Sqrt(float64(dims[len(dims)-1]))
		case strings.HasSuffix(name, "ln_1.weight"), strings.HasSuffix(name, "ln_2.weight"), strings.HasSuffix(name, "ln_f.weight"):
			v = 1 + 0.1*base
		default:
			v = 0.1 * base
		}
		out[i] = float32(v)
	}
	return out
}

func loadGPTFixture(t *testing.T) gptFixture {
	raw, err := os.ReadFile("testdata/gpt_expected.json")
	require.NoError(t, err)
	var fx gptFixture
	require.NoError(t, json.Unmarshal(raw, &fx))
	return fx
}

// fixtureGPT builds the fixture's GPT with torch's weights.
func fixtureGPT(t *testing.T, d *xla.Device, fx gptFixture, tanh bool) *GPT {
	c := fx.Config
	model, err := NewGPT(d, NewRand(1), GPTConfig{Vocab: c.Vocab, BlockSize: c.Block, Layers: c.Layers, Heads: c.Heads, Width: c.Width, TanhGELU: tanh})
	require.NoError(t, err)
	byName := map[string]*xla.Tensor{}
	for _, n := range StateDict(model) {
		byName[n.Name] = n.Tensor
	}
	for _, sd := range fx.StateDict {
		name, k := sd[0].(string), int(sd[1].(float64))
		p := byName[name]
		require.NotNil(t, p, "torch's %s is in our state dict", name)
		values, err := xla.FromSlice(d, gptFixtureValues(name, k, p.Dims()), p.Dims()...)
		require.NoError(t, err)
		require.NoError(t, p.Assign(values))
	}
	return model
}

// closeTo asserts got equals want to rel relative to want's largest
// magnitude (elementwise relative error is meaningless near 0).
func closeTo(t *testing.T, want []float64, got []float32, rel float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	scale := 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	worst := 0.0
	for i := range want {
		worst = max(worst, math.Abs(float64(got[i])-want[i]))
	}
	assert.LessOrEqual(t, worst, rel*scale, "%s: max |diff| %.3g vs %g × max |torch| %.3g", what, worst, rel, scale)
}

// TestGPTMatchesTorch: the state dict has torch's names and shapes in
// order (head.weight tied: one parameter), and the logits, the loss and
// every parameter's gradient equal torch 2.9's on the same weights and
// batch to 1e-5 of each tensor's largest magnitude, for exact and tanh
// GELU.
func TestGPTMatchesTorch(t *testing.T) {
	fx := loadGPTFixture(t)
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	for _, tc := range []struct {
		name string
		tanh bool
		want gptRun
	}{{"exact GELU", false, fx.Exact}, {"tanh GELU", true, fx.Tanh}} {
		t.Run(tc.name, func(t *testing.T) {
			model := fixtureGPT(t, d, fx, tc.tanh)
			var names []string
			for _, n := range StateDict(model) {
				names = append(names, n.Name)
			}
			for i, sd := range fx.StateDict {
				assert.Equal(t, sd[0], names[i])
			}
			assert.Equal(t, "head.weight", names[len(names)-1], "the tied head is in the state dict")
			assert.Len(t, NamedParameters(model), len(tc.want.Grads), "the tied head is one parameter")

			ids, err := xla.FromSlice(d, fx.IDs, fx.Batch[0], fx.Batch[1])
			require.NoError(t, err)
			targets, err := xla.FromSlice(d, fx.Targets, fx.Batch[0]*fx.Batch[1])
			require.NoError(t, err)
			logits := model.Forward(ids)
			loss := CrossEntropyLoss(logits.Reshape(-1, fx.Config.Vocab), targets, ReductionMean)
			require.NoError(t, loss.Backward())
			got, err := logits.Float32s(ctx)
			require.NoError(t, err)
			closeTo(t, tc.want.Logits, got, 1e-5, "logits")
			l, err := loss.Item(ctx)
			require.NoError(t, err)
			assert.InDelta(t, tc.want.Loss, l, 1e-5*tc.want.Loss, "loss")
			for _, p := range NamedParameters(model) {
				require.NotNil(t, p.Tensor.Grad(), p.Name)
				g, err := p.Tensor.Grad().Float32s(ctx)
				require.NoError(t, err)
				closeTo(t, tc.want.Grads[p.Name], g, 1e-5, "gradient of "+p.Name)
			}
		})
	}
}

// TestGPTBFloat16Policy: under SetComputeDType(BFloat16) the parameters
// and their gradients stay float32, the loss is float32, and the loss
// and gradients stay within bf16's rounding of the float32 model's.
func TestGPTBFloat16Policy(t *testing.T) {
	fx := loadGPTFixture(t)
	d := newEngine(t, 1).Device(0)
	ctx := testContext(t)
	model := fixtureGPT(t, d, fx, false)
	require.NoError(t, SetComputeDType(model, xla.BFloat16))
	ids, err := xla.FromSlice(d, fx.IDs, fx.Batch[0], fx.Batch[1])
	require.NoError(t, err)
	targets, err := xla.FromSlice(d, fx.Targets, fx.Batch[0]*fx.Batch[1])
	require.NoError(t, err)
	logits := model.Forward(ids)
	assert.Equal(t, xla.BFloat16, logits.DType(), "the head computes in bf16")
	loss := CrossEntropyLoss(logits.Reshape(-1, fx.Config.Vocab), targets, ReductionMean)
	assert.Equal(t, xla.Float32, loss.DType(), "the loss is float32")
	require.NoError(t, loss.Backward())
	l, err := loss.Item(ctx)
	require.NoError(t, err)
	assert.InDelta(t, fx.Exact.Loss, l, 0.01*fx.Exact.Loss, "loss within 1%% of float32's")
	for _, p := range NamedParameters(model) {
		assert.Equal(t, xla.Float32, p.Tensor.DType(), p.Name)
		require.Equal(t, xla.Float32, p.Tensor.Grad().DType(), p.Name)
		g, err := p.Tensor.Grad().Float32s(ctx)
		require.NoError(t, err)
		closeTo(t, fx.Exact.Grads[p.Name], g, 0.05, "bf16 gradient of "+p.Name)
	}
	require.NoError(t, SetComputeDType(model, xla.InvalidDType))
	assert.Equal(t, xla.Float32, model.Forward(ids).DType(), "the policy turns off")
}

// TestGPTInitIsGPT2s: NewGPT draws as GPT-2 and nanoGPT do: every bias
// zero (the MLP's and attention's Linears included, which drew
// U(±1/√fan_in) when built), LayerNorm weights one, the other weights
// N(0, 0.02) and the residual projections N(0, 0.02/√(2·layers)).
func TestGPTInitIsGPT2s(t *testing.T) {
	d := xlatest.NewEngine(t, 1).Device(0)
	ctx := xlatest.Context(t)
	model, err := NewGPT(d, NewRand(3), GPTConfig{Vocab: 50, BlockSize: 16, Layers: 2, Heads: 2, Width: 64})
	require.NoError(t, err)
	biases := 0
	for _, p := range NamedParameters(model) {
		v, err := p.Tensor.Float32s(ctx)
		require.NoError(t, err)
		switch {
		case strings.HasSuffix(p.Name, "bias"):
			biases++
			assert.Equal(t, make([]float32, len(v)), v, "%s is zero", p.Name)
		case len(p.Tensor.Dims()) == 1:
			for _, x := range v {
				require.Equal(t, float32(1), x, "%s is one", p.Name)
			}
		default:
			want := 0.02
			if isResidualProjection(p.Name) {
				want = 0.02 / math.Sqrt(4)
			}
			sum := 0.0
			for _, x := range v {
				sum += float64(x) * float64(x)
			}
			std := math.Sqrt(sum / float64(len(v)))
			assert.InDelta(t, want, std, 0.15*want, "%s's standard deviation", p.Name)
		}
	}
	assert.Greater(t, biases, 6, "the blocks' biases were checked")
}
