package xla

import (
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// toyCompiled is toyStep as a compiled step over params.
func toyCompiled(params []*Tensor) *CompiledStep {
	return Compile(func(args ...*Tensor) ([]*Tensor, error) {
		loss, err := toyStep(params, args[0], args[1])
		if err != nil {
			return nil, err
		}
		return []*Tensor{loss}, nil
	})
}

// trainToy runs steps toy steps on replicas devices, lazily or compiled,
// and returns every replica's losses and final parameters.
func trainToy(t *testing.T, eng *Engine, replicas, steps int, compiled bool) ([][]float32, [][][]float32) {
	t.Helper()
	ctx := testContext(t)
	initial := toyInit(7)
	losses := make([][]float32, replicas)
	finals := make([][][]float32, replicas)
	err := eng.RunReplicas(ctx, replicas, func(ctx context.Context, r Replica) error {
		params, x, y, err := toyReplica(r.Device(), initial, r.Index())
		if err != nil {
			return err
		}
		step := toyCompiled(params)
		for range steps {
			var loss *Tensor
			if compiled {
				outs, err := step.Run(ctx, r.Device(), x, y)
				if err != nil {
					return err
				}
				loss = outs[0]
			} else {
				if loss, err = toyStep(params, x, y); err != nil {
					return err
				}
				if err := r.MarkStep(ctx); err != nil {
					return err
				}
			}
			v, err := loss.Item(ctx)
			if err != nil {
				return err
			}
			losses[r.Index()] = append(losses[r.Index()], float32(v))
		}
		for _, p := range params {
			vs, err := p.Float32s(ctx)
			if err != nil {
				return err
			}
			finals[r.Index()] = append(finals[r.Index()], vs)
		}
		return nil
	})
	require.NoError(t, err)
	return losses, finals
}

// TestCompiledStepEqualsLazy trains the toy model (in-graph gradient
// all-reduce on 2 replicas) lazily and compiled from the same start: the
// compiled step runs the same program, so every loss and every final
// parameter is bit-identical, and it traces the Go function once.
func TestCompiledStepEqualsLazy(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		eng := newEngine(t, replicas)
		lazyLosses, lazyParams := trainToy(t, eng, replicas, 12, false)
		ResetMetrics()
		losses, params := trainToy(t, eng, replicas, 12, true)
		m := GetMetrics()
		assert.Equal(t, lazyLosses, losses, "replicas=%d: losses", replicas)
		assert.Equal(t, lazyParams, params, "replicas=%d: final parameters", replicas)
		assert.EqualValues(t, replicas, m.StepTraces, "replicas=%d: one trace per replica", replicas)
		assert.LessOrEqual(t, m.Compilations, int64(1), "replicas=%d", replicas)
		assert.Zero(t, m.Collections-1, "replicas=%d: only the trace collects", replicas)
		// From the second call on, the 4 parameters' buffers are donated.
		assert.EqualValues(t, 4*replicas*(12-2), m.DonatedBuffers, "replicas=%d: donated buffers", replicas)
	}
}

// TestCompiledStepReplaysWithoutRunningGo checks that later calls do not
// run the Go function, and that in-place state, the RNG and returned
// values behave as in lazy mode: a counter tensor advances, the random
// draw differs each call and equals the lazy sequence.
func TestCompiledStepReplaysWithoutRunningGo(t *testing.T) {
	eng := newEngine(t, 1)
	ctx := testContext(t)
	d := eng.Device(0)

	lazyDraws := func() [][]float32 {
		require.NoError(t, d.ManualSeed(3))
		var out [][]float32
		for range 3 {
			vs, err := d.RandU(Float32, 4).Float32s(ctx)
			require.NoError(t, err)
			out = append(out, vs)
		}
		return out
	}()

	require.NoError(t, d.ManualSeed(3))
	counter := mustFromSlice(t, d, []float32{0})
	calls := 0
	step := Compile(func(args ...*Tensor) ([]*Tensor, error) {
		calls++
		if err := counter.Assign(counter.AddScalar(1)); err != nil {
			return nil, err
		}
		return []*Tensor{d.RandU(Float32, 4), counter}, nil
	})
	var draws [][]float32
	var kept []*Tensor
	for range 3 {
		outs, err := step.Run(ctx, d)
		require.NoError(t, err)
		require.Len(t, outs, 2)
		kept = append(kept, outs[1])
		vs, err := outs[0].Float32s(ctx)
		require.NoError(t, err)
		draws = append(draws, vs)
	}
	assert.Equal(t, 1, calls, "the Go function runs only at the trace")
	assert.Equal(t, lazyDraws, draws, "the RNG advances as in lazy mode")
	c, err := counter.Item(ctx)
	require.NoError(t, err)
	assert.Equal(t, 3.0, c, "state assigned in the step is updated in place")
	for i, k := range kept {
		v, err := k.Item(ctx)
		require.NoError(t, err)
		assert.Equal(t, float64(i+1), v, "a result returned earlier keeps its value")
	}

	// A reseed between calls is seen: the step reads the RNG it finds.
	require.NoError(t, d.ManualSeed(3))
	outs, err := step.Run(ctx, d)
	require.NoError(t, err)
	vs, err := outs[0].Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, lazyDraws[0], vs)
}

// TestCompiledStepGradients covers the gradient slots: accumulation across
// calls without ZeroGrad, ZeroGrad outside the step, and a gradient read
// after the step, each against lazy mode.
func TestCompiledStepGradients(t *testing.T) {
	eng := newEngine(t, 1)
	ctx := testContext(t)
	d := eng.Device(0)
	run := func(compiled bool, zeroOutside bool) (grads [][]float32, w []float32) {
		p := mustFromSlice(t, d, []float32{1, 2, 3}, 3)
		require.NoError(t, p.SetRequiresGrad(true))
		x := mustFromSlice(t, d, []float32{0.5, -1, 2}, 3)
		fn := func(args ...*Tensor) ([]*Tensor, error) {
			loss := p.Mul(args[0]).Square().Sum()
			if err := loss.Backward(); err != nil {
				return nil, err
			}
			return nil, p.Assign(p.Sub(p.Grad().MulScalar(0.01)).Detach())
		}
		step := Compile(fn)
		for i := range 4 {
			if compiled {
				_, err := step.Run(ctx, d, x)
				require.NoError(t, err)
			} else {
				_, err := fn(x)
				require.NoError(t, err)
				require.NoError(t, d.MarkStep(ctx))
			}
			require.NotNil(t, p.Grad(), "call %d", i)
			g, err := p.Grad().Float32s(ctx)
			require.NoError(t, err)
			grads = append(grads, g)
			if zeroOutside && i%2 == 1 {
				p.ZeroGrad()
			}
		}
		w, err := p.Float32s(ctx)
		require.NoError(t, err)
		return grads, w
	}
	for _, zero := range []bool{false, true} {
		lazyGrads, lazyW := run(false, zero)
		grads, w := run(true, zero)
		assert.Equal(t, lazyGrads, grads, "zeroOutside=%v: gradients", zero)
		assert.Equal(t, lazyW, w, "zeroOutside=%v: parameters", zero)
	}
}

// TestCompiledStepRetracesOnNewShapes runs batches of two sizes: each size
// is traced once, and results match lazy mode's.
func TestCompiledStepRetracesOnNewShapes(t *testing.T) {
	eng := newEngine(t, 1)
	ctx := testContext(t)
	d := eng.Device(0)
	w := mustFromSlice(t, d, []float32{1, -2}, 2, 1)
	step := Compile(func(args ...*Tensor) ([]*Tensor, error) {
		return []*Tensor{args[0].MatMul(w).Sum()}, nil
	})
	ResetMetrics()
	for _, rows := range []int{1, 3, 1, 3, 0} {
		x := make([]float32, rows*2)
		want := 0.0
		for i := range x {
			x[i] = float32(i + 1)
			if i%2 == 0 {
				want += float64(x[i])
			} else {
				want -= 2 * float64(x[i])
			}
		}
		outs, err := step.Run(ctx, d, mustFromSlice(t, d, x, rows, 2))
		require.NoError(t, err, "rows=%d", rows)
		v, err := outs[0].Item(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, v, "rows=%d", rows)
	}
	assert.EqualValues(t, 3, GetMetrics().StepTraces, "one trace per batch shape")
}

// TestCompiledStepSchedulerReachesTheProgram: a value held in a tensor and
// changed between calls (how the optimizers keep their learning rate) is
// read at every call; the program is not retraced.
func TestCompiledStepSchedulerReachesTheProgram(t *testing.T) {
	eng := newEngine(t, 1)
	ctx := testContext(t)
	d := eng.Device(0)
	lr := d.Hyperparameter(1, Float32)
	w := mustFromSlice(t, d, []float32{10}, 1)
	step := Compile(func(...*Tensor) ([]*Tensor, error) {
		return nil, w.Assign(w.Sub(lr))
	})
	ResetMetrics()
	for _, v := range []float64{1, 0.5, 0, 2} {
		require.NoError(t, lr.Assign(d.Hyperparameter(v, Float32)))
		_, err := step.Run(ctx, d)
		require.NoError(t, err)
	}
	got, err := w.Item(ctx)
	require.NoError(t, err)
	assert.Equal(t, 10-1-0.5-0-2.0, got)
	assert.EqualValues(t, 1, GetMetrics().StepTraces)
}

// TestCompiledStepHostileUse: the misuses a careless caller makes get an
// error that says what to do, and the step stays usable.
func TestCompiledStepHostileUse(t *testing.T) {
	eng := newEngine(t, 2)
	ctx := testContext(t)
	d0, d1 := eng.Device(0), eng.Device(1)
	x := mustFromSlice(t, d0, []float32{1, 2}, 2)
	identity := Compile(func(args ...*Tensor) ([]*Tensor, error) { return args, nil })

	t.Run("nil device and arguments", func(t *testing.T) {
		_, err := identity.Run(ctx, nil, x)
		assert.ErrorContains(t, err, "nil device")
		_, err = identity.Run(ctx, d0, nil)
		assert.ErrorContains(t, err, "argument 0 is nil")
	})
	t.Run("argument on another device", func(t *testing.T) {
		_, err := identity.Run(ctx, d1, x)
		assert.ErrorContains(t, err, "Tensor.To")
	})
	t.Run("argument carrying an error", func(t *testing.T) {
		_, err := identity.Run(ctx, d0, x.Reshape(3))
		assert.ErrorContains(t, err, "argument 0")
	})
	t.Run("returning an argument gives its value", func(t *testing.T) {
		outs, err := identity.Run(ctx, d0, x)
		require.NoError(t, err)
		vs, err := outs[0].Float32s(ctx)
		require.NoError(t, err)
		assert.Equal(t, []float32{1, 2}, vs)
		outs, err = identity.Run(ctx, d0, mustFromSlice(t, d0, []float32{5, 6}, 2))
		require.NoError(t, err)
		vs, err = outs[0].Float32s(ctx)
		require.NoError(t, err)
		assert.Equal(t, []float32{5, 6}, vs, "the result follows the argument, not the trace")
	})
	t.Run("reading a value inside the step", func(t *testing.T) {
		reads := Compile(func(args ...*Tensor) ([]*Tensor, error) {
			_, err := args[0].Sum().Item(ctx)
			return nil, err
		})
		_, err := reads.Run(ctx, d0, x)
		assert.ErrorContains(t, err, "cannot read values")
		require.NoError(t, d0.MarkStep(ctx), "the device stays usable")
	})
	t.Run("the function fails", func(t *testing.T) {
		boom := errors.New("boom")
		fails := Compile(func(...*Tensor) ([]*Tensor, error) { return nil, boom })
		_, err := fails.Run(ctx, d0)
		assert.ErrorIs(t, err, boom)
		_, err = fails.Run(ctx, d0)
		assert.ErrorIs(t, err, boom, "a failed trace is not kept")
	})
	t.Run("nil or foreign result", func(t *testing.T) {
		_, err := Compile(func(...*Tensor) ([]*Tensor, error) { return []*Tensor{nil}, nil }).Run(ctx, d0)
		assert.ErrorContains(t, err, "nil tensor")
		y := mustFromSlice(t, d1, []float32{1}, 1)
		_, err = Compile(func(...*Tensor) ([]*Tensor, error) { return []*Tensor{y}, nil }).Run(ctx, d0)
		assert.ErrorContains(t, err, "returned result 0 on")
	})
	t.Run("a result carrying an op error", func(t *testing.T) {
		_, err := Compile(func(args ...*Tensor) ([]*Tensor, error) { return []*Tensor{args[0].Reshape(5)}, nil }).Run(ctx, d0, x)
		assert.ErrorContains(t, err, "Reshape")
	})
	t.Run("an empty step", func(t *testing.T) {
		empty := Compile(func(...*Tensor) ([]*Tensor, error) { return nil, nil })
		for range 2 {
			outs, err := empty.Run(ctx, d0)
			require.NoError(t, err)
			assert.Empty(t, outs)
		}
	})
	t.Run("reading through a tensor reassigned inside the step", func(t *testing.T) {
		src := mustFromSlice(t, d0, []float32{3}, 1)
		dst := mustFromSlice(t, d0, []float32{0}, 1)
		_, err := Compile(func(...*Tensor) ([]*Tensor, error) {
			if err := dst.Assign(src); err != nil {
				return nil, err
			}
			return []*Tensor{dst.AddScalar(2)}, nil
		}).Run(ctx, d0)
		assert.ErrorContains(t, err, "pass it as an argument")
	})
	t.Run("pending work before the call runs first", func(t *testing.T) {
		y := x.MulScalar(3)
		outs, err := identity.Run(ctx, d0, y)
		require.NoError(t, err)
		vs, err := outs[0].Float32s(ctx)
		require.NoError(t, err)
		assert.Equal(t, []float32{3, 6}, vs)
	})
	t.Run("cancelled context", func(t *testing.T) {
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, err := identity.Run(cancelled, d0, x)
		assert.ErrorIs(t, err, context.Canceled)
	})
	t.Run("nested compiled steps inline", func(t *testing.T) {
		inner := Compile(func(args ...*Tensor) ([]*Tensor, error) { return []*Tensor{args[0].MulScalar(2)}, nil })
		outer := Compile(func(args ...*Tensor) ([]*Tensor, error) { return inner.Run(ctx, d0, args[0].AddScalar(1)) })
		for range 2 {
			outs, err := outer.Run(ctx, d0, x)
			require.NoError(t, err)
			vs, err := outs[0].Float32s(ctx)
			require.NoError(t, err)
			assert.Equal(t, []float32{4, 6}, vs)
		}
	})
}

// TestCompiledStepReplicasDisagree: one replica runs the compiled step
// while the other runs MarkStep, or they run different programs: both get
// ErrReplicaMismatch, nobody hangs.
func TestCompiledStepReplicasDisagree(t *testing.T) {
	eng := newEngine(t, 2)
	ctx := testContext(t)
	err := eng.RunReplicas(ctx, 2, func(ctx context.Context, r Replica) error {
		x := mustFromSlice(t, r.Device(), []float32{1}, 1)
		step := Compile(func(args ...*Tensor) ([]*Tensor, error) { return []*Tensor{args[0].AddScalar(2)}, nil })
		if _, err := step.Run(ctx, r.Device(), x); err != nil { // traces together
			return err
		}
		if r.Index() == 1 {
			_ = x.AddScalar(5)
			return r.MarkStep(ctx)
		}
		_, err := step.Run(ctx, r.Device(), x)
		return err
	})
	assert.ErrorIs(t, err, ErrReplicaMismatch)
}

// TestCompiledStepAfterClose fails with the engine's closed error.
func TestCompiledStepAfterClose(t *testing.T) {
	eng := newEngine(t, 1)
	ctx := testContext(t)
	d := eng.Device(0)
	x := mustFromSlice(t, d, []float32{1}, 1)
	step := Compile(func(args ...*Tensor) ([]*Tensor, error) { return []*Tensor{args[0].AddScalar(2)}, nil })
	_, err := step.Run(ctx, d, x)
	require.NoError(t, err)
	require.NoError(t, eng.Close())
	_, err = step.Run(ctx, d, x)
	assert.ErrorContains(t, err, "closed")
}

// TestCompiledStepNeverDonatesASharedBuffer: a compiled step donates a
// parameter's buffer to its program only while nothing else holds it. A
// copy taken with To, an Assign into another tensor, or a lazy op reading
// the parameter between calls keeps the old value readable and right.
func TestCompiledStepNeverDonatesASharedBuffer(t *testing.T) {
	eng := newEngine(t, 1)
	ctx := testContext(t)
	d := eng.Device(0)
	w := mustFromSlice(t, d, []float32{1, 2}, 2)
	step := Compile(func(...*Tensor) ([]*Tensor, error) { return nil, w.Assign(w.MulScalar(3)) })
	run := func() {
		_, err := step.Run(ctx, d)
		require.NoError(t, err)
	}
	run()
	run() // w's buffer is now the step's own: the next call may donate it
	kinds := []struct {
		name string
		hold func() *Tensor
	}{
		{"To the same device", func() *Tensor {
			c, err := w.To(ctx, d)
			require.NoError(t, err)
			return c
		}},
		{"Assign into another tensor", func() *Tensor {
			c := mustFromSlice(t, d, []float32{0, 0}, 2)
			require.NoError(t, c.Assign(w))
			return c
		}},
		{"a pending op reading it", func() *Tensor { return w.AddScalar(0.5) }},
		{"a Detach", func() *Tensor { return w.Detach() }},
	}
	for _, k := range kinds {
		before, err := w.Float32s(ctx)
		require.NoError(t, err)
		held := k.hold()
		ResetMetrics()
		run()
		got, err := held.Float32s(ctx)
		require.NoError(t, err, k.name)
		want := before
		if k.name == "a pending op reading it" {
			want = []float32{before[0] + 0.5, before[1] + 0.5}
		}
		assert.Equal(t, want, got, "%s: the held value survives the next step", k.name)
		after, err := w.Float32s(ctx)
		require.NoError(t, err)
		assert.Equal(t, []float32{before[0] * 3, before[1] * 3}, after, k.name)
		run()
		assert.EqualValues(t, 1, GetMetrics().DonatedBuffers, "%s: the step after donates its own buffer again", k.name)
	}
}

// TestCompiledStepDonatesTheParameterBuffer: from the second call on, the
// buffer a parameter held is given to the program (PJRT reports it
// deleted or donated), and a read of it through xla is refused.
func TestCompiledStepDonatesTheParameterBuffer(t *testing.T) {
	eng := newEngine(t, 1)
	ctx := testContext(t)
	d := eng.Device(0)
	w := mustFromSlice(t, d, []float32{1, 2}, 2)
	step := Compile(func(...*Tensor) ([]*Tensor, error) { return nil, w.Assign(w.MulScalar(3)) })
	for range 2 {
		_, err := step.Run(ctx, d)
		require.NoError(t, err)
	}
	old := w.data
	_, err := step.Run(ctx, d)
	require.NoError(t, err)
	require.True(t, old.donated)
	_, err = old.tensor.LocalClone()
	assert.ErrorContains(t, err, "donated", "PJRT took the buffer over")
	_, err = old.readHost(d)
	assert.ErrorIs(t, err, errDonated)
	got, err := w.Float32s(ctx)
	require.NoError(t, err)
	assert.Equal(t, []float32{27, 54}, got)
}

// TestCompiledStepAliasesOnlyWhatItOverwrites: the program declares a
// parameter donatable only into the output that replaces it, never into
// another output of its shape (XLA would copy a parameter that other ops
// still read), and a lazy MarkStep's program declares none.
func TestCompiledStepAliasesOnlyWhatItOverwrites(t *testing.T) {
	eng := newEngine(t, 1)
	ctx := testContext(t)
	d := eng.Device(0)
	w := mustFromSlice(t, d, []float32{1, 2}, 2)
	c := mustFromSlice(t, d, []float32{3, 4}, 2)
	step := Compile(func(...*Tensor) ([]*Tensor, error) {
		product := w.Mul(c)
		return []*Tensor{product.AddScalar(1)}, w.Assign(product)
	})
	_, err := step.Run(ctx, d)
	require.NoError(t, err)
	var plan *stepPlan
	for _, variants := range step.plans[planPlace{device: d, group: d.currentGroup()}] {
		plan = variants[0]
	}
	require.NotNil(t, plan)
	require.Len(t, plan.inputs, 2)
	wOut := plan.program.aliases[0]
	require.GreaterOrEqual(t, wOut, 0, "w is overwritten: donatable")
	assert.NotEqual(t, plan.returns[0], wOut, "into w's new value, not the result")
	assert.Equal(t, -1, plan.program.aliases[1], "c is only read")

	product := w.Mul(c)
	require.NoError(t, w.Assign(product))
	require.NoError(t, d.MarkStep(ctx))
	lazy := eng.cache.last[deviceSetKey([]*Device{d})]
	require.NotNil(t, lazy)
	assert.NotSame(t, plan.program, lazy)
	assert.Nil(t, lazy.aliases, "a lazy step donates nothing, so its program declares nothing")
	runtime.KeepAlive(product)
}

// TestCompiledStepAcrossRunReplicasKeepsNoOldPlans: each RunReplicas is a
// new group, so a step reused across them traces again; the plans of the
// groups that ended (and the tensors they hold) are dropped.
func TestCompiledStepAcrossRunReplicasKeepsNoOldPlans(t *testing.T) {
	eng := newEngine(t, 2)
	ctx := testContext(t)
	step := Compile(func(args ...*Tensor) ([]*Tensor, error) { return []*Tensor{args[0].AddScalar(2)}, nil })
	for round := range 3 {
		err := eng.RunReplicas(ctx, 2, func(ctx context.Context, r Replica) error {
			x := mustFromSlice(t, r.Device(), []float32{float32(round)}, 1)
			for range 2 {
				outs, err := step.Run(ctx, r.Device(), x)
				if err != nil {
					return err
				}
				v, err := outs[0].Item(ctx)
				if err != nil {
					return err
				}
				assert.Equal(t, float64(round+2), v)
			}
			return nil
		})
		require.NoError(t, err)
		step.mu.Lock()
		assert.Len(t, step.plans, 2, "round %d: one place per device", round)
		step.mu.Unlock()
	}
}

// TestCompiledStepReplicaLeavesEarly: one replica returns while the other
// waits in a compiled step's meeting: the waiting one gets an error naming
// the replicas, and RunReplicas returns instead of hanging.
func TestCompiledStepReplicaLeavesEarly(t *testing.T) {
	eng := newEngine(t, 2)
	ctx := testContext(t)
	step := Compile(func(args ...*Tensor) ([]*Tensor, error) { return []*Tensor{args[0].AddScalar(2)}, nil })
	err := eng.RunReplicas(ctx, 2, func(ctx context.Context, r Replica) error {
		x := mustFromSlice(t, r.Device(), []float32{1}, 1)
		calls := 3
		if r.Index() == 1 {
			calls = 1
		}
		for range calls {
			if _, err := step.Run(ctx, r.Device(), x); err != nil {
				return err
			}
		}
		return nil
	})
	assert.ErrorContains(t, err, "every replica must run the same number of steps")
}
