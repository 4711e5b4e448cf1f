package neuron

import (
	"fmt"
	"strconv"

	"github.com/xladdp/xladdp/backend"
)

// Target is the Trainium device target, registered with package backend
// when this package is linked (package targets links it, and package xla
// links targets, so every program on lazy tensors opens --device neuron).
const Target backend.Target = "neuron"

// deviceCountVars give the NeuronCore count of a job, as torch-neuronx's
// launchers set them.
var deviceCountVars = []string{"NEURON_NUM_DEVICES", "NEURONCORE_NUM_DEVICES"}

func init() {
	backend.RegisterTarget(backend.TargetSpec{
		Target:      Target,
		PluginFile:  "libneuronpjrt.so",
		InstallHint: "install the Neuron SDK's libneuronxla (pip install libneuronxla neuronx-cc) in the Python environment of $" + EnvPython,
		ClientOptions: func(opts backend.Options) (map[string]any, error) {
			if opts.CPUDevices != 0 || opts.CPUExecution != "" {
				return nil, fmt.Errorf("%w: CPUDevices and CPUExecution are for the cpu target; neuron uses the NeuronCores of NEURON_RT_VISIBLE_CORES",
					backend.ErrBadOption)
			}
			return nil, nil
		},
		// The platform is whatever libneuronxla's plugin names itself:
		// the bootstrap vouches for the plugin.
		Bootstrap:   bootstrapPlugin,
		DeviceCount: deviceCount,
		Preflight: func() []string {
			var out []string
			for _, p := range Preflight(PreflightOptions{}) {
				out = append(out, p.String())
			}
			return out
		},
	})
}

// deviceCount reads $NEURON_NUM_DEVICES, else $NEURONCORE_NUM_DEVICES.
func deviceCount(getenv func(string) string) (int, bool, error) {
	for _, name := range deviceCountVars {
		if v := getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return 0, false, fmt.Errorf("$%s=%q: want a positive device count", name, v)
			}
			return n, true, nil
		}
	}
	return 0, false, nil
}
