package xla

import (
	"fmt"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// runProgram executes p on the replicas' input buffers (device-major) and
// wraps the outputs, also device-major, as GoMLX tensors.
func runProgram(gomlx backends.Backend, p *program, buffers []backends.Buffer, donate []bool) ([]*tensors.Tensor, error) {
	inputs := make([]*pjrt.Buffer, len(buffers))
	for i, b := range buffers {
		pb, ok := b.(*pjrt.Buffer)
		if !ok {
			return nil, fmt.Errorf("xla: input %d is a %T, not a PJRT buffer", i, b)
		}
		inputs[i] = pb
	}
	outs, err := p.exec.Execute(inputs...).SetDonate(donate).Done()
	if err != nil {
		return nil, fmt.Errorf("xla: executing the program: %w", err)
	}
	tensorsOut := make([]*tensors.Tensor, len(outs))
	for i, o := range outs {
		if tensorsOut[i], err = tensors.FromBuffer(gomlx, o); err != nil {
			return nil, fmt.Errorf("xla: wrapping output %d: %w", i, err)
		}
	}
	return tensorsOut, nil
}
