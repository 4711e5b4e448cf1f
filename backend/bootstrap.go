package backend

import (
	"context"
	"fmt"
	"sync"

	"github.com/gomlx/go-xla/pkg/pjrt"
)

// Bootstrap prepares a target whose plugin needs more than loading (the
// Neuron plugin calls back into an embedded Python interpreter that must
// be running first) and returns the plugin's path and where it came from.
// It sees the Open options (Replicas tells how many local devices a
// one-process job drives).
type Bootstrap func(ctx context.Context, opts Options) (path, source string, err error)

var bootstraps = struct {
	sync.Mutex
	byTarget map[Target]Bootstrap
}{byTarget: map[Target]Bootstrap{}}

// RegisterBootstrap makes target t available, prepared by b. Package
// neuron registers the neuron target's when it is linked in.
func RegisterBootstrap(t Target, b Bootstrap) {
	bootstraps.Lock()
	defer bootstraps.Unlock()
	bootstraps.byTarget[t] = b
}

func bootstrapOf(t Target) Bootstrap {
	bootstraps.Lock()
	defer bootstraps.Unlock()
	return bootstraps.byTarget[t]
}

// neuronSpec is the neuron target, once package neuron registered its
// bootstrap. Its platform is whatever the plugin libneuronxla names
// reports (the bootstrap vouches for it).
var neuronSpec = targetSpec{
	target:      Neuron,
	pluginFile:  "libneuronpjrt.so",
	installHint: "install the Neuron SDK's libneuronxla (pip install libneuronxla neuronx-cc) in the Python environment of $XLADDP_NEURON_PYTHON",
	clientOptions: func(opts Options) (pjrt.NamedValuesMap, error) {
		if opts.CPUDevices != 0 || opts.CPUExecution != "" {
			return nil, fmt.Errorf("%w: CPUDevices and CPUExecution are for the cpu target; neuron uses the NeuronCores of NEURON_RT_VISIBLE_CORES",
				ErrBadOption)
		}
		return nil, nil
	},
}
