package xla

import (
	"fmt"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/xladdp/xladdp/backend"
)

// runProgram starts p on the replicas' input buffers (device-major) and
// wraps the outputs, also device-major, as GoMLX tensors at once; the
// execution goes on asynchronously (see stepExecution). inputs are the
// buffers' owners, held until it finishes; donate (nil or per argument
// position) gives those inputs to the program.
func runProgram(e *Engine, p *program, numDevices int, buffers []compute.Buffer, inputs []*deviceData, donate []bool) ([]*tensors.Tensor, *backend.Execution, error) {
	outs, x, err := e.backend.Execute(p.exec, numDevices, buffers, donate, inputs)
	if err != nil {
		return nil, nil, fmt.Errorf("xla: executing the program: %w", err)
	}
	tensorsOut := make([]*tensors.Tensor, len(outs))
	for i, o := range outs {
		if tensorsOut[i], err = tensors.FromBuffer(o); err != nil {
			_ = x.Wait()
			return nil, nil, fmt.Errorf("xla: wrapping output %d: %w", i, err)
		}
	}
	return tensorsOut, x, nil
}

// stepExecution is a group's last step, running on the devices while the
// replicas trace the next one. Its error surfaces at the next MarkStep or
// at a read, naming the step.
type stepExecution struct {
	x       *backend.Execution
	step    int
	devices string
	once    sync.Once
	err     error
}

// wait blocks until the step finished and returns its error, named.
func (s *stepExecution) wait() error {
	s.once.Do(func() {
		if err := s.x.Wait(); err != nil {
			s.err = fmt.Errorf("xla: step %d on %s failed while running asynchronously: %w", s.step, s.devices, err)
		}
	})
	return s.err
}
