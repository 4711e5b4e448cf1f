package xla

import (
	"fmt"
	"os"

	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/xladdp/xladdp/internal/workerenv"

	"github.com/xladdp/xladdp/internal/knobs"
)

// EnvCompileOnly: XLADDP_COMPILE_ONLY=1 makes every MarkStep compile its
// program (filling the persistent cache, XLADDP_CACHE_DIR, and a plugin's
// own cache such as Neuron's) without executing it. Outputs read as zeros.
// It is torch-neuronx's neuron_parallel_compile pass: run a few steps of
// the real script once to compile every graph ahead, so the real run only
// loads them (`ddprun --compile-only` sets it for every worker).
const EnvCompileOnly = workerenv.CompileOnly

// compileOnlyFromEnv reads EnvCompileOnly; an unreadable value is an
// error at the first MarkStep rather than a silent choice either way.
func compileOnlyFromEnv() (bool, error) {
	on, err := knobs.CompileOnly(os.Getenv(EnvCompileOnly))
	if err != nil {
		return false, fmt.Errorf("xla: %w", err)
	}
	return on, nil
}

// SetCompileOnly turns compile-only mode on or off for the engine's next
// MarkSteps, overriding EnvCompileOnly.
func (e *Engine) SetCompileOnly(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.compileOnly, e.compileOnlyErr = on, nil
}

// CompileOnly reports whether MarkStep compiles without executing.
func (e *Engine) CompileOnly() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.compileOnly
}

func (e *Engine) compileOnlyMode() (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.compileOnly, e.compileOnlyErr
}

// zeroOutputs stands in for an execution in compile-only mode: one host
// tensor of zeros per output and replica (device-major, as an execution
// returns them), moved to a device only if a later step reads it.
func zeroOutputs(p *program, replicas int) []*tensors.Tensor {
	outs := make([]*tensors.Tensor, 0, replicas*len(p.outputShapes))
	for range replicas {
		for _, s := range p.outputShapes {
			outs = append(outs, tensors.FromShape(s))
		}
	}
	return outs
}

// outputShapesOf lists a trace's output shapes: what a program computes.
func outputShapesOf(tr *trace) []shapes.Shape {
	out := make([]shapes.Shape, len(tr.outputs))
	for i, o := range tr.outputs {
		out[i] = o.shape
	}
	return out
}
