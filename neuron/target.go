package neuron

import (
	"fmt"
	"os"

	"github.com/xladdp/xladdp/backend"
	"github.com/xladdp/xladdp/neuron/trn"
)

// Target is the Trainium device target, registered with package backend
// when this package is linked (package targets links it, and package xla
// links targets, so every program on lazy tensors opens --device neuron).
const Target backend.Target = "neuron"

func init() {
	backend.RegisterTarget(backend.TargetSpec{
		Target:      Target,
		PluginFile:  "libneuronpjrt.so",
		InstallHint: "install the Neuron SDK's libneuronxla (pip install libneuronxla neuronx-cc) in the Python environment of $" + trn.EnvPython,
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
		DeviceCount: trn.DeviceCount,
		// A process started per NeuronCore drives one: the launcher's
		// count goes, and the process takes its core from LOCAL_RANK and
		// the NEURON_RT_VISIBLE_CORES it inherits (torch-xla's rule).
		ProcessEnv: func(int, int, func(string) string) ([]string, error) {
			return []string{trn.EnvNumDevices + "=", trn.EnvCoreNumDevices + "="}, nil
		},
		// The compiler and its flags decide the program as much as the
		// plugin does.
		CompilerIdentity: func() string {
			id := trn.EnvCCFlags + "=" + os.Getenv(trn.EnvCCFlags) + "|" + trn.EnvLogicalNCConfig + "=" + os.Getenv(trn.EnvLogicalNCConfig)
			if sdk, found, _, err := trn.FindSDK(os.Getenv); err == nil && found {
				id += "|neuronx-cc " + sdk.CompilerVersion + "|libneuronxla " + sdk.Libneuronxla
			}
			return id
		},
		Preflight: func() []string {
			var out []string
			problems := trn.Preflight(trn.PreflightOptions{})
			if sdk, found, _, err := trn.FindSDK(os.Getenv); err != nil {
				out = append(out, err.Error())
			} else if found {
				out = append(out, "found "+sdk.String())
				problems = append(problems, sdk.Problems(os.Getenv)...)
			}
			for _, p := range problems {
				out = append(out, p.String())
			}
			return out
		},
	})
}
