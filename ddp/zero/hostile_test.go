package zero_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xladdp/xladdp/ddp"
	"github.com/xladdp/xladdp/ddp/checkpoint"
	"github.com/xladdp/xladdp/ddp/internal/ddptest"
	"github.com/xladdp/xladdp/ddp/zero"
	"github.com/xladdp/xladdp/xla"
	"github.com/xladdp/xladdp/xla/nn"
	"github.com/xladdp/xladdp/xla/optim"
	"github.com/xladdp/xladdp/xla/xlatest"
)

func init() { ddptest.Scenarios["zero-hostile"] = zeroHostileScenario }

// zeroHostileScenario builds a sharded toy optimizer whose settings
// differ on rank 1 ($XLADDP_TEST_CASE: "lr" or "kind") and reports the
// error.
func zeroHostileScenario(rep *ddptest.Report) {
	ctx := context.Background()
	e, done, err := ddptest.JoinJob(ctx, 1)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	defer done()
	step := 0
	inner, err := ddptest.NewModel(e.Device(0), "toy", 1, &step)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	model, err := ddp.Wrap(ctx, inner)
	if err != nil {
		rep.Error = err.Error()
		return
	}
	name := "adam"
	if rep.Rank == 1 && os.Getenv("XLADDP_TEST_CASE") == "kind" {
		name = "adadelta"
	}
	build := ddptest.OptimizerFor("toy", name, model).Build
	if rep.Rank == 1 && os.Getenv("XLADDP_TEST_CASE") == "lr" {
		build = func(groups []optim.ParamGroup) (optim.Optimizer, error) {
			return optim.NewAdam(groups[0].Params, optim.AdamConfig{LR: 2e-2, WeightDecay: 0.01})
		}
	}
	_, err = zero.New(ctx, model, nil, build)
	rep.Errors = []string{ddptest.ErrorText(err)}
}

// TestZeroRefusesRanksThatDiffer: ranks (or local replicas) whose
// optimizers differ in kind or settings get an error on every one of
// them, naming the line that differs and the ranks.
func TestZeroRefusesRanksThatDiffer(t *testing.T) {
	for c, want := range map[string]string{
		"lr":   `"lr":0.01`,
		"kind": "optim.Adadelta",
	} {
		t.Run(c, func(t *testing.T) {
			cmds, outs := ddptest.Launch(t, "zero-hostile", 2, "XLADDP_TEST_TIMEOUT=30s", "XLADDP_TEST_CASE="+c)
			for r, rep := range ddptest.WaitReports(t, cmds, outs) {
				require.Empty(t, rep.Error, "rank %d", r)
				require.Len(t, rep.Errors, 1, "rank %d", r)
				assert.Contains(t, rep.Errors[0], "built ZeroRedundancyOptimizer differently", "rank %d", r)
				assert.Contains(t, rep.Errors[0], want, "rank %d", r)
			}
		})
	}
	e := xlatest.NewEngine(t, 2)
	ctx := xlatest.Context(t)
	errs := make([]error, 2)
	_ = e.RunReplicas(ctx, 2, func(ctx context.Context, r xla.Replica) error {
		step := 0
		inner, err := ddptest.NewModel(r.Device(), "toy", 1, &step)
		require.NoError(t, err)
		model, err := ddp.Wrap(ctx, inner)
		require.NoError(t, err)
		_, errs[r.Index()] = zero.New(ctx, model, nil, func(groups []optim.ParamGroup) (optim.Optimizer, error) {
			return optim.NewSGD(groups[0].Params, optim.SGDConfig{LR: 0.1 * float64(1+r.Index())})
		})
		return nil
	})
	for i, err := range errs {
		require.Error(t, err, "local replica %d", i)
		assert.Regexp(t, `built ZeroRedundancyOptimizer differently .*: local replicas [01] and [01] differ: .*lr\\":0\.2`, err.Error(), "local replica %d", i)
	}
}

// TestZeroRefusesBadModules: no module, no optimizer, a module whose
// parameters are all empty, a parameter in no group or two, a tensor
// that is not the module's; an empty parameter beside others is left out.
func TestZeroRefusesBadModules(t *testing.T) {
	e := xlatest.NewEngine(t, 1)
	ctx := xlatest.Context(t)
	d := e.Device(0)
	sgd := func(groups []optim.ParamGroup) (optim.Optimizer, error) {
		return optim.NewSGD(groups[0].Params, optim.SGDConfig{LR: 0.1})
	}
	param := func(dims ...int) *xla.Tensor {
		p := d.Zeros(xla.Float32, dims...)
		require.NoError(t, p.SetRequiresGrad(true))
		return p
	}
	empty, full, other := param(0, 3), param(4), param(2)
	wrapped := func(ps ...*xla.Tensor) *ddp.DistributedDataParallel {
		w, err := ddp.Wrap(ctx, tensorModule(ps))
		require.NoError(t, err)
		return w
	}
	_, err := zero.New(ctx, nil, nil, sgd)
	assert.ErrorContains(t, err, "wrap the model with ddp.Wrap first")
	_, err = zero.New(ctx, wrapped(full), nil, nil)
	assert.ErrorContains(t, err, "nil NewOptimizer")
	_, err = zero.New(ctx, wrapped(empty), nil, sgd)
	assert.ErrorContains(t, err, "no parameters with elements")
	_, err = zero.New(ctx, wrapped(full, other), []optim.ParamGroup{{Params: []*xla.Tensor{full}}}, sgd)
	assert.ErrorContains(t, err, "is in no parameter group")
	_, err = zero.New(ctx, wrapped(full, other), []optim.ParamGroup{{Params: []*xla.Tensor{full, other}}, {Params: []*xla.Tensor{full}}}, sgd)
	assert.ErrorContains(t, err, "is in parameter groups 0 and 1")
	_, err = zero.New(ctx, wrapped(full), []optim.ParamGroup{{Params: []*xla.Tensor{full, param(3)}}}, sgd)
	assert.ErrorContains(t, err, "not a parameter of the wrapped module")
	module := wrapped(empty, full)
	z, err := zero.New(ctx, module, nil, sgd)
	require.NoError(t, err)
	var masters [][]int
	for _, s := range z.State() {
		if strings.HasPrefix(s.Name, "master.") {
			masters = append(masters, s.Tensor.Dims())
		}
	}
	assert.Equal(t, [][]int{{4}}, masters, "one bucket of the 4 elements of the one non-empty parameter")
	// checkpoint's door takes the sharded kind from the optimizer: a
	// directory of every replica's shard, never one replica's shard in a
	// file; a single file is refused, saying what it holds.
	c := optim.Checkpoint{Model: module, Optimizer: z, Step: 1}
	dir := filepath.Join(t.TempDir(), "sharded")
	require.NoError(t, checkpoint.Save(ctx, dir, c))
	assert.DirExists(t, dir)
	file := filepath.Join(t.TempDir(), "one.safetensors")
	require.NoError(t, os.WriteFile(file, []byte("{}"), 0o644))
	assert.ErrorContains(t, checkpoint.Load(ctx, file, &c), "holds a single-file checkpoint", "checkpoint.Load")
	_, err = zero.New(ctx, module, nil, sgd)
	assert.ErrorContains(t, err, "already has a hook", "a second sharded optimizer on one wrapper")
	closed := wrapped(full)
	closed.Close()
	_, err = zero.New(ctx, closed, nil, sgd)
	assert.ErrorContains(t, err, "closed wrapper")
}

// TestZeroLoadRefusesBrokenCheckpoints: a shard missing, a shard from
// another job, a manifest that lies (replica count, a bucket's length, a
// file outside the directory), LATEST naming nothing: each an error that
// says which, and the model and optimizer keep their values.
func TestZeroLoadRefusesBrokenCheckpoints(t *testing.T) {
	e := xlatest.NewEngine(t, 2)
	ctx := xlatest.Context(t)
	save := func(dir string, seed uint64) {
		require.NoError(t, e.RunReplicas(ctx, 2, func(ctx context.Context, r xla.Replica) error {
			model, z, err := newShardedModel(ctx, r.Device(), "toy", "adam", seed)
			if err != nil {
				return err
			}
			return checkpoint.Save(ctx, dir, optim.Checkpoint{Model: model, Optimizer: z, Step: 3})
		}))
	}
	good, foreign := t.TempDir(), t.TempDir()
	save(good, 1)
	save(foreign, 2)
	version := func(dir string) string {
		id, err := os.ReadFile(filepath.Join(dir, "LATEST"))
		require.NoError(t, err)
		return filepath.Join(dir, strings.TrimSpace(string(id)))
	}
	// The manifest as docs/zero.md describes it, edited as JSON.
	type object = map[string]any
	readManifest := func(dir string) object {
		data, err := os.ReadFile(filepath.Join(version(dir), "manifest.json"))
		require.NoError(t, err)
		var m object
		require.NoError(t, json.Unmarshal(data, &m))
		return m
	}
	editManifest := func(dir string, edit func(m object)) {
		m := readManifest(dir)
		edit(m)
		path := filepath.Join(version(dir), "manifest.json")
		data, err := json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, data, 0o644))
	}
	shard1 := "shard-00001-of-00002.safetensors"
	for _, c := range []struct {
		name, want string
		breakIt    func(dir string)
	}{
		{"shard missing", "a file of the checkpoint is missing", func(dir string) { require.NoError(t, os.Remove(filepath.Join(version(dir), shard1))) }},
		{"shard of another job", "not the file the manifest lists", func(dir string) {
			data, err := os.ReadFile(filepath.Join(version(foreign), shard1))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(version(dir), shard1), data, 0o644))
		}},
		{"another job's shard, manifest rehashed", "is not shard 1 of checkpoint", func(dir string) {
			data, err := os.ReadFile(filepath.Join(version(foreign), shard1))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(version(dir), shard1), data, 0o644))
			theirs := readManifest(foreign)["shards"].([]any)
			editManifest(dir, func(m object) { m["shards"].([]any)[1] = theirs[1] })
		}},
		{"replica count lies", "3 shard files for 2 replicas", func(dir string) {
			editManifest(dir, func(m object) { m["shards"] = append(m["shards"].([]any), m["shards"].([]any)[0]); m["replicas"] = 2 })
		}},
		{"bucket length lies", "length 166", func(dir string) {
			editManifest(dir, func(m object) { m["buckets"].([]any)[0].(object)["length"] = 166.0 })
		}},
		{"file outside", "outside its directory", func(dir string) {
			editManifest(dir, func(m object) { m["model"].(object)["name"] = "../model.safetensors" })
		}},
		{"LATEST names nothing", "no such file", func(dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "LATEST"), []byte("step-9-0\n"), 0o644))
		}},
		{"not a checkpoint", "not a sharded checkpoint", func(dir string) { require.NoError(t, os.Remove(filepath.Join(dir, "LATEST"))) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.CopyFS(dir, os.DirFS(good)))
			c.breakIt(dir)
			model, z, err := newShardedModel(ctx, e.Device(0), "toy", "adam", 9)
			require.NoError(t, err)
			before, err := ddptest.ParameterValues(ctx, model)
			require.NoError(t, err)
			loaded := optim.Checkpoint{Model: model, Optimizer: z}
			err = checkpoint.Load(ctx, dir, &loaded)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			after, err := ddptest.ParameterValues(ctx, model)
			require.NoError(t, err)
			assert.Equal(t, before, after, "a failed load changed the model")
			assert.Zero(t, loaded.Step)
		})
	}
}

// tensorModule is a module of the given parameters.
type tensorModule []*xla.Tensor

func (m tensorModule) Forward(x *xla.Tensor) *xla.Tensor { return x }
func (m tensorModule) Params() []nn.Named {
	out := make([]nn.Named, len(m))
	for i, t := range m {
		out[i] = nn.Named{Name: fmt.Sprintf("p%d", i), Tensor: t}
	}
	return out
}
func (m tensorModule) Buffers() []nn.Named        { return nil }
func (m tensorModule) Children() []nn.NamedModule { return nil }
