package backend

import (
	"fmt"
	"strconv"
	"strings"
)

// The targets backend provides itself; others register from their own
// packages.
func init() {
	RegisterTarget(TargetSpec{
		Target:            CPU,
		PluginFile:        "pjrt_c_api_cpu_plugin.so",
		PythonPackageGlob: "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so",
		InstallHint:       "run `make deps` (installs PyPI's lammps-jax-pjrt-cpu 0.11.2 as ~/.local/lib/go-xla/pjrt_c_api_cpu_plugin.so)",
		// The CPU device's memory is host memory: let GoMLX skip the copy.
		SharedBuffers: true,
		Platform:      "cpu",
		ClientOptions: func(opts Options) (map[string]any, error) {
			n, err := cpuDeviceCount(opts)
			if err != nil {
				return nil, err
			}
			if opts.Deterministic {
				n = max(n, DeterministicCPUDevices())
			}
			mode, err := cpuExecution(opts)
			if err != nil {
				return nil, err
			}
			return map[string]any{"cpu_device_count": int64(n), "asynchronous": mode == CPUAsync}, nil
		},
		ProcessEnv: func(int, int, func(string) string) ([]string, error) {
			return []string{EnvCPUDevices + "=1"}, nil
		},
	})
	RegisterTarget(TargetSpec{
		Target:            CUDA,
		Aliases:           []string{"gpu"},
		PluginFile:        "pjrt_c_api_cuda_plugin.so",
		PythonPackageGlob: "jax_plugins/xla_cuda*/xla_cuda_plugin.so",
		InstallHint:       "on a machine with an NVIDIA GPU, `pip install jax-cuda12-pjrt` (or jax-cuda13-pjrt) so its jax_plugins/xla_cuda*/xla_cuda_plugin.so is found",
		Platform:          "cuda",
		ClientOptions: func(opts Options) (map[string]any, error) {
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
		ProcessEnv: func(index, count int, getenv func(string) string) ([]string, error) {
			gpu, err := visibleGPU(getenv(envCUDAVisibleDevices), index, count)
			return []string{envCUDAVisibleDevices + "=" + gpu}, err
		},
	})
}

// envCUDAVisibleDevices lists the GPUs a CUDA process may use.
const envCUDAVisibleDevices = "CUDA_VISIBLE_DEVICES"

// visibleGPU is the GPU of process index of count: the index-th entry of
// the user's CUDA_VISIBLE_DEVICES list, or index when there is none; a
// list naming fewer GPUs than processes is refused.
func visibleGPU(userList string, index, count int) (string, error) {
	if strings.TrimSpace(userList) == "" {
		return strconv.Itoa(index), nil
	}
	entries := strings.Split(userList, ",")
	if len(entries) < count {
		return "", fmt.Errorf("%s=%q names %d GPU(s) for %d processes: name one per process or start fewer",
			envCUDAVisibleDevices, userList, len(entries), count)
	}
	return strings.TrimSpace(entries[index]), nil
}
