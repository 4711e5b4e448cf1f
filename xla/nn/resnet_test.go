package nn

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/xla"
)

// resnetFixture is what testdata/gen_resnet18_fixture.py recorded from torch.
type resnetFixture struct {
	FileSHA256    string   `json:"file_sha256"`
	FileSize      int      `json:"file_size"`
	StateDict     [][3]any `json:"state_dict"`
	NumParameters int      `json:"num_parameters"`
	InputShape    []int    `json:"input_shape"`
	LogitsEval    []float64
	LogitsTrain   []float64
}

func loadResnetFixture(t *testing.T) (resnetFixture, []byte) {
	raw, err := os.ReadFile("testdata/resnet18_expected.json")
	require.NoError(t, err)
	var fx resnetFixture
	require.NoError(t, json.Unmarshal(raw, &fx))
	var logits struct {
		Eval  []float64 `json:"logits_eval"`
		Train []float64 `json:"logits_train"`
	}
	require.NoError(t, json.Unmarshal(raw, &logits))
	fx.LogitsEval, fx.LogitsTrain = logits.Eval, logits.Train
	header, err := os.ReadFile("testdata/resnet18_header.json")
	require.NoError(t, err)
	return fx, header
}

// fixtureValues is gen_resnet18_fixture.py's formula for the k-th tensor of
// the state dict, evaluated in float64 and rounded to float32.
func fixtureValues(name string, k int, dims []int) []float32 {
	n := 1
	for _, d := range dims {
		n *= d
	}
	out := make([]float32, n)
	for i := range out {
		base := (math.Mod(float64(i)*7919+float64(k)*104729, 1000) - 500) / 500
		var v float64
		switch {
		case strings.HasSuffix(name, "weight") && len(dims) >= 2:
			v = base / math.Sqrt(float64(n/dims[0]))
		case strings.HasSuffix(name, "weight"):
			v = 1 + 0.1*base
		case strings.HasSuffix(name, "running_var"):
			v = 1 + 0.5*math.Abs(base)
		default:
			v = 0.1 * base
		}
		out[i] = float32(v)
	}
	return out
}

// rebuildTorchFile reassembles the file torch wrote from its header and
// the formula; the caller checks its sha256 against torch's.
func rebuildTorchFile(t *testing.T, fx resnetFixture, header []byte) []byte {
	var entries map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(header, &entries))
	data := make([]byte, fx.FileSize-8-len(header))
	for k, sd := range fx.StateDict {
		name := sd[0].(string)
		var e struct {
			Shape   []int  `json:"shape"`
			Offsets [2]int `json:"data_offsets"`
		}
		require.NoError(t, json.Unmarshal(entries[name], &e), name)
		if strings.HasSuffix(name, "num_batches_tracked") {
			binary.LittleEndian.PutUint64(data[e.Offsets[0]:], uint64(k))
			continue
		}
		for i, v := range fixtureValues(name, k, e.Shape) {
			binary.LittleEndian.PutUint32(data[e.Offsets[0]+4*i:], math.Float32bits(v))
		}
	}
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(file, header...), data...)
}

// TestResNet18MatchesTorchvision: our ResNet-18 has torchvision's 11,689,512
// parameters and its state dict names, shapes and dtypes in order; the
// safetensors file torch wrote (rebuilt here byte for byte: same sha256)
// loads; and the logits on a fixed input match torch's in eval and train
// mode within 2e-4 absolute + 1e-3 relative (float32 through 18 layers).
func TestResNet18MatchesTorchvision(t *testing.T) {
	fx, header := loadResnetFixture(t)
	d := newEngine(t, 1).Device(0)
	model, err := NewResNet18(d, NewRand(1), ResNetConfig{NumClasses: 1000})
	require.NoError(t, err)
	assert.Equal(t, fx.NumParameters, NumParameters(model))
	assert.Equal(t, 11_689_512, NumParameters(model))

	state := StateDict(model)
	require.Len(t, state, len(fx.StateDict))
	torchDTypes := map[string]xla.DType{"torch.float32": xla.Float32, "torch.int64": xla.Int64}
	for i, sd := range fx.StateDict {
		var shape []int
		for _, v := range sd[1].([]any) {
			shape = append(shape, int(v.(float64)))
		}
		assert.Equal(t, sd[0], state[i].Name, "state dict entry %d", i)
		assert.Equal(t, shape, state[i].Tensor.Dims(), sd[0])
		assert.Equal(t, torchDTypes[sd[2].(string)], state[i].Tensor.DType(), sd[0])
	}

	file := rebuildTorchFile(t, fx, header)
	sum := sha256.Sum256(file)
	require.Equal(t, fx.FileSHA256, hex.EncodeToString(sum[:]), "the rebuilt file is byte-identical to torch's")
	path := filepath.Join(t.TempDir(), "resnet18_torch.safetensors")
	require.NoError(t, os.WriteFile(path, file, 0o644))
	_, err = LoadStateDict(path, model)
	require.NoError(t, err)

	ctx := testContext(t)
	n := 1
	for _, s := range fx.InputShape {
		n *= s
	}
	xs := make([]float32, n)
	for i := range xs {
		xs[i] = float32(math.Mod(float64(i)*31, 255)/255 - 0.5)
	}
	x, err := xla.FromSlice(d, xs, fx.InputShape...)
	require.NoError(t, err)
	for _, mode := range []struct {
		name  string
		train bool
		want  []float64
	}{{"eval", false, fx.LogitsEval}, {"train", true, fx.LogitsTrain}} {
		if mode.train {
			Train(model)
		} else {
			Eval(model)
		}
		logits, err := model.Forward(x).Float32s(ctx)
		require.NoError(t, err)
		require.Len(t, logits, len(mode.want))
		worst := 0.0
		for i, w := range mode.want {
			diff := math.Abs(float64(logits[i]) - w)
			worst = max(worst, diff)
			if !assert.InDelta(t, w, float64(logits[i]), 2e-4+1e-3*math.Abs(w), "%s logit %d", mode.name, i) {
				break
			}
		}
		t.Logf("%s: largest logit difference from torch %.2e", mode.name, worst)
	}
}
