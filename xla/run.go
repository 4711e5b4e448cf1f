package xla

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// runGraph executes a compiled program, turning GoMLX's panics into errors.
func runGraph(p *program, buffers []backends.Buffer, donate []bool, device backends.DeviceNum) (out []*tensors.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("xla: executing the program: %v", r)
		}
	}()
	return p.graph.RunWithBuffers(buffers, donate, device), nil
}
