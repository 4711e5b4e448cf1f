package backend

import (
	"fmt"

	"github.com/gomlx/go-xla/pkg/pjrt"
)

// targetSpec is how one target finds its plugin and configures its client.
type targetSpec struct {
	target Target
	// pluginFile is the name searched for in go-xla's plugin directories.
	pluginFile string
	// pythonPackageGlob is where a pip-installed plugin lives, relative to a
	// site-packages directory; searched after pluginFile.
	pythonPackageGlob string
	// installHint says how to get the plugin, for the not-found error.
	installHint string
	// gomlxConfig is appended to the plugin path in GoMLX's backend config.
	gomlxConfig string
	// clientOptions returns the PJRT client create options.
	clientOptions func(Options) (pjrt.NamedValuesMap, error)
	// platform is the platform name the target's plugin reports.
	platform string
}

var targetSpecs = map[Target]targetSpec{
	CPU: {
		target:            CPU,
		pluginFile:        "pjrt_c_api_cpu_plugin.so",
		pythonPackageGlob: "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so",
		installHint:       "run `make deps` (installs PyPI's lammps-jax-pjrt-cpu 0.11.2 as ~/.local/lib/go-xla/pjrt_c_api_cpu_plugin.so)",
		// The CPU device's memory is host memory: let GoMLX skip the copy.
		gomlxConfig: ",shared_buffers",
		platform:    "cpu",
		clientOptions: func(opts Options) (pjrt.NamedValuesMap, error) {
			n, err := cpuDeviceCount(opts)
			if err != nil {
				return nil, err
			}
			mode, err := cpuExecution(opts)
			if err != nil {
				return nil, err
			}
			return pjrt.NamedValuesMap{"cpu_device_count": int64(n), "asynchronous": mode == CPUAsync}, nil
		},
	},
	CUDA: {
		target:            CUDA,
		pluginFile:        "pjrt_c_api_cuda_plugin.so",
		pythonPackageGlob: "jax_plugins/xla_cuda*/xla_cuda_plugin.so",
		installHint:       "on a machine with an NVIDIA GPU, `pip install jax-cuda12-pjrt` (or jax-cuda13-pjrt) so its jax_plugins/xla_cuda*/xla_cuda_plugin.so is found",
		platform:          "cuda",
		clientOptions: func(opts Options) (pjrt.NamedValuesMap, error) {
			if opts.CPUDevices != 0 {
				return nil, fmt.Errorf("%w: CPUDevices=%d is for the cpu target; cuda uses the GPUs it finds",
					ErrBadDeviceCount, opts.CPUDevices)
			}
			if opts.CPUExecution != "" {
				return nil, fmt.Errorf("%w: CPUExecution=%q is for the cpu target; cuda always executes asynchronously",
					ErrBadOption, string(opts.CPUExecution))
			}
			return nil, nil
		},
	},
}

// lookupTarget returns the spec of a target that can run here.
func lookupTarget(t Target) (targetSpec, error) {
	if spec, ok := targetSpecs[t]; ok {
		return spec, nil
	}
	if t == Neuron {
		if bootstrapOf(Neuron) != nil {
			return neuronSpec, nil
		}
		return targetSpec{}, fmt.Errorf("%w: the neuron target is prepared by package neuron, which every program using package xla links; "+
			"a program that opens a backend without xla adds import _ \"github.com/xladdp/xladdp/neuron\"; it needs a Trainium (Trn1/Trn2) instance "+
			"with the Neuron SDK's libneuronxla; to run the same program here use the cpu target (XLADDP_DEVICE=cpu)",
			ErrTargetUnavailable)
	}
	return targetSpec{}, fmt.Errorf("%w %q", ErrUnknownTarget, t)
}
