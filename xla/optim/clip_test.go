package optim

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
)

// torchClipGroups is what testdata/gen_torch_clip_groups.py recorded.
type torchClipGroups struct {
	Clip []struct {
		MaxNorm  float64 `json:"max_norm"`
		NormType any     `json:"norm_type"`
		Poison   *string `json:"poison"`
		Total    any     `json:"total"`
		Grads    [][]any `json:"grads"`
	} `json:"clip"`
	AdamWGroups struct {
		Trajectory [][2][]float64 `json:"trajectory"`
	} `json:"adamw_groups"`
}

func loadClipGroups(t *testing.T) (torchClipGroups, map[string]any) {
	raw, err := os.ReadFile("testdata/torch_clip_groups.json")
	require.NoError(t, err)
	var fx torchClipGroups
	require.NoError(t, json.Unmarshal(raw, &fx))
	var all map[string]any
	require.NoError(t, json.Unmarshal(raw, &all))
	return fx, all
}

// number decodes a fixture value: a float, or "nan"/"inf" as a string.
func number(t *testing.T, v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case string:
		f, err := strconv.ParseFloat(x, 64)
		require.NoError(t, err)
		return f
	}
	t.Fatalf("fixture value %v", v)
	return 0
}

func flat(t *testing.T, v any) []float64 {
	var out []float64
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			out = append(out, flat(t, e)...)
		}
	default:
		out = append(out, number(t, x))
	}
	return out
}

func sameFloat(t *testing.T, want, got float64, what string) {
	t.Helper()
	if math.IsNaN(want) || math.IsInf(want, 0) {
		assert.Equal(t, strconv.FormatFloat(want, 'g', -1, 64), strconv.FormatFloat(got, 'g', -1, 64), what)
		return
	}
	assert.InDelta(t, want, got, 1e-12+1e-12*math.Abs(want), what)
}

// TestClipGradNormMatchesTorch: the total norm and the clipped gradients
// equal torch 2.9's clip_grad_norm_ in float64 for norm types 2, inf and
// 1.5, a max norm that clips and one that does not, max norm 0, and NaN
// and inf gradients (NaN and inf norms, as torch). Every case after the
// first runs the same program: the max norm is an input.
func TestClipGradNormMatchesTorch(t *testing.T) {
	fx, all := loadClipGroups(t)
	d := newDevice(t)
	ctx := context.Background()
	grads := all["grads"].([]any)
	compilations := map[string]int64{}
	for ci, c := range fx.Clip {
		normType := number(t, c.NormType)
		params := make([]*xla.Tensor, len(grads))
		for i, g := range grads {
			values := flat(t, g)
			dims := []int{len(values)}
			if i == 1 {
				dims = []int{2, 2}
			}
			if i == 1 && c.Poison != nil {
				values[1] = number(t, *c.Poison)
			}
			p := d.Zeros(xla.Float64, dims...)
			require.NoError(t, p.SetRequiresGrad(true))
			gt, err := xla.FromSlice(d, values, dims...)
			require.NoError(t, err)
			require.NoError(t, p.SetGrad(gt))
			params[i] = p
		}
		before := xla.GetMetrics()
		total, err := ClipGradNorm(params, c.MaxNorm, normType)
		require.NoError(t, err)
		require.NoError(t, d.MarkStep(ctx))
		compilations[strconv.FormatFloat(normType, 'g', -1, 64)] += xla.GetMetrics().Compilations - before.Compilations
		got, err := total.Item(ctx)
		require.NoError(t, err)
		sameFloat(t, number(t, c.Total), got, "case "+strconv.Itoa(ci)+" total norm")
		for i, p := range params {
			g, err := xla.Values[float64](ctx, p.Grad())
			require.NoError(t, err)
			want := flat(t, c.Grads[i])
			for j := range want {
				sameFloat(t, want[j], g[j], "case "+strconv.Itoa(ci)+" gradient "+strconv.Itoa(i))
			}
		}
	}
	assert.Equal(t, map[string]int64{"2": 1, "+Inf": 1, "1.5": 1}, compilations, "one program per norm type, whatever the max norm and the values")
}

// TestAdamWGroupsMatchTorch: AdamW with a decayed matrix group and an
// undecayed vector group follows torch 2.9's trajectory (float64).
func TestAdamWGroupsMatchTorch(t *testing.T) {
	fx, all := loadClipGroups(t)
	g := all["adamw_groups"].(map[string]any)
	d := newDevice(t)
	ctx := context.Background()
	upload := func(key string, dims ...int) *xla.Tensor {
		v, err := xla.FromSlice(d, flat(t, g[key]), dims...)
		require.NoError(t, err)
		return v
	}
	mat, vec := upload("mat0", 2, 2), upload("vec0", 3)
	require.NoError(t, mat.SetRequiresGrad(true))
	require.NoError(t, vec.SetRequiresGrad(true))
	groups := DecayGroups([]nn.Named{{Name: "w", Tensor: mat}, {Name: "b", Tensor: vec}}, 0.1)
	require.Equal(t, []*xla.Tensor{mat}, groups[0].Params)
	require.Equal(t, []*xla.Tensor{vec}, groups[1].Params)
	opt, err := NewAdamWGroups(groups, AdamConfig{LR: 0.05, Beta2: 0.95})
	require.NoError(t, err)
	wm, cm, wv, cv := upload("w_mat", 2, 2), upload("c_mat", 2, 2), upload("w_vec", 3), upload("c_vec", 3)
	for step, want := range fx.AdamWGroups.Trajectory {
		opt.ZeroGrad()
		loss := wm.Mul(mat.Sub(cm).Square()).Sum().Add(wv.Mul(vec.Sub(cv).Square()).Sum())
		require.NoError(t, loss.Backward())
		require.NoError(t, opt.Step())
		for i, p := range []*xla.Tensor{mat, vec} {
			got, err := xla.Values[float64](ctx, p)
			require.NoError(t, err)
			for j := range want[i] {
				assert.InDelta(t, want[i][j], got[j], 1e-12+1e-12*math.Abs(want[i][j]), "step %d tensor %d [%d]", step, i, j)
			}
		}
	}
}

func TestClipAndGroupsRefuseBadInput(t *testing.T) {
	d := newDevice(t)
	p := d.Zeros(xla.Float32, 3)
	require.NoError(t, p.SetRequiresGrad(true))
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"negative max norm", func() error { _, err := ClipGradNorm([]*xla.Tensor{p}, -1, 2); return err }(), "must be finite and >= 0"},
		{"NaN max norm", func() error { _, err := ClipGradNorm([]*xla.Tensor{p}, math.NaN(), 2); return err }(), "must be finite"},
		{"norm type 0", func() error { _, err := ClipGradNorm([]*xla.Tensor{p}, 1, 0); return err }(), "norm type 0"},
		{"nil parameter", func() error { _, err := ClipGradNorm([]*xla.Tensor{nil}, 1, 2); return err }(), "parameter 0 is nil"},
		{"no parameters", func() error { _, err := ClipGradNorm(nil, 1, 2); return err }(), "no parameters"},
		{"a parameter in two groups", func() error {
			_, err := NewAdamWGroups([]ParamGroup{{Params: []*xla.Tensor{p}}, {Params: []*xla.Tensor{p}}}, AdamConfig{LR: 1})
			return err
		}(), "in groups 0 and 1"},
		{"negative group decay", func() error {
			_, err := NewAdamWGroups([]ParamGroup{{Params: []*xla.Tensor{p}, WeightDecay: -1}}, AdamConfig{LR: 1})
			return err
		}(), "weight decay -1"},
		{"empty groups", func() error { _, err := NewAdamWGroups([]ParamGroup{{}, {}}, AdamConfig{LR: 1}); return err }(), "no parameters"},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.ErrorContains(t, tc.err, tc.want) })
	}
	norm, err := ClipGradNorm([]*xla.Tensor{p}, 1, 2)
	require.NoError(t, err, "no gradient yet: nothing to clip")
	v, err := norm.Item(context.Background())
	require.NoError(t, err)
	assert.Zero(t, v)
}

// TestWarmupCosine follows nanoGPT's get_lr in float64.
func TestWarmupCosine(t *testing.T) {
	d := newDevice(t)
	p := d.Zeros(xla.Float32, 1)
	require.NoError(t, p.SetRequiresGrad(true))
	opt, err := NewSGD([]*xla.Tensor{p}, SGDConfig{LR: 1e-3})
	require.NoError(t, err)
	s, err := NewWarmupCosine(opt, 10, 110, 1e-4)
	require.NoError(t, err)
	want := func(it int) float64 {
		switch {
		case it < 10:
			return 1e-3 * float64(it+1) / 11
		case it > 110:
			return 1e-4
		}
		return 1e-4 + 0.5*(1+math.Cos(math.Pi*float64(it-10)/100))*(1e-3-1e-4)
	}
	for it := range 130 {
		assert.InDelta(t, want(it), opt.LR(), 1e-15, "iteration %d", it)
		s.Step()
	}
	assert.InDelta(t, 1e-3, want(10), 1e-15, "the peak after warmup")
	for _, bad := range [][3]float64{{-1, 10, 0}, {10, 10, 0}, {0, 10, 2e-3}, {0, 10, math.NaN()}} {
		_, err := NewWarmupCosine(opt, int(bad[0]), int(bad[1]), bad[2])
		assert.ErrorContains(t, err, "needs 0 <= warmup < decay iterations", "%v", bad)
	}
}
