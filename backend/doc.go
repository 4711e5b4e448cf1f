// Package backend chooses a device target, finds and loads its PJRT
// plugin, creates the client with the target's options and lists the
// addressable devices. It knows nothing of lazy tensors or ranks.
//
// # Targets
//
// A target is registered whole (RegisterTarget: name, aliases, plugin
// search or bootstrap, client options, device count, preflight), as
// image.RegisterFormat registers a decoder. Package backend registers cpu
// and cuda (alias gpu); other packages register theirs from init, and
// package targets links every one for programs
// that want them all. Backend has no target-specific code beyond its own two.
//
// # Choosing a target and plugin
//
// The target is Options.Target, else $XLADDP_DEVICE, else torch-xla's
// $PJRT_DEVICE (any registered name, in any case), else cpu. The plugin is
// Options.PluginPath, else $XLADDP_PJRT_PLUGIN, else a search: go-xla's
// directories ($PJRT_PLUGIN_LIBRARY_PATH, else ~/.local/lib/go-xla and
// /usr/local/lib/go-xla) for pjrt_c_api_<target>_plugin.so, then python3's
// site-packages for a pip-installed plugin (lammps_jax_pjrt_cpu for cpu, JAX's
// jax_plugins/xla_cuda*/xla_cuda_plugin.so for cuda). A candidate is checked
// to be an ELF shared library for this machine exporting GetPjrtApi before
// it is loaded. GoMLX's GitHub auto-install is switched off.
//
// The CPU plugin creates cpu_device_count virtual devices (Options.CPUDevices,
// else $XLADDP_CPU_DEVICES, else torch-xla's $CPU_NUM_DEVICES, else
// Options.Replicas, else 1). The count must be from 1 to MaxCPUDevices: the
// stock plugin aborts the process on a negative count and returns a client
// with no devices for 0. PJRT client options must be int64, not int. The
// CPU client executes synchronously unless Options.CPUExecution (else
// $XLADDP_CPU_EXECUTION) is async; see Options.CPUExecution for why.
//
// # Device collectives: what GoMLX v0.28.16 needs
//
// In-graph collectives across the local devices of one client work on the
// stock CPU plugin (proved by TestAllReduceAcrossDevices):
//
//   - Build a graph with graph.NewGraph and, before adding any node, call
//     g.SetSPMD(mesh) with mesh := distributed.NewDeviceMesh([]int{n},
//     []string{"replica"}). With n > 1 the devices default to DeviceNum
//     0..n-1; with n == 1 GoMLX v0.26.0 assigned none and compilation
//     failed ("not portable"), so call g.SetDeviceAssignment always.
//   - g.Distributed().AllReduceOne(x, compute.ReduceOpSum) (or AllReduce on a
//     slice, one collective for many tensors) lowers to a StableHLO all_reduce
//     whose replica groups come from the mesh axes; Sum, Product, Max and Min
//     are the reduction kinds.
//   - The program is compiled once for all n devices. g.Run takes the inputs
//     device-major (device 0's parameters, then device 1's, ...) and returns
//     the outputs device-major.
//
// GoMLX's backend interface (compute.CollectiveOps) exposes only
// AllReduce, although go-xla's stablehlo package implements
// AllGather, AllToAll, CollectivePermute and CollectiveBroadcast. GoMLX's
// other distribution strategy, AutoSharding (Shardy), shards automatically
// and forbids explicit collectives; DDP uses SPMD with explicit all-reduce.
// The stock CPU plugin cannot run collectives across processes, only across
// its own devices.
package backend
