// Package neuron is the Trainium device target: bootstrapping the Neuron
// PJRT plugin (libneuronpjrt.so from libneuronxla: found without Python,
// loaded directly for libneuronxla 3, through an embedded Python for
// libneuronxla 2: cgo), applying the per-process Neuron and EFA environment
// before the plugin loads, and the compile cache and compiler flags. The
// facts it applies (topology, device counts, environment names and
// values, preflight checks) are package neuron/trn's, which the launcher
// shares without cgo.
//
// It knows nothing of DDP internals. Linked, it registers the neuron
// target with package backend (plugin bootstrap, device count, the
// environment of a process per core, preflight); package targets links
// it (unless built with -tags noneuron), and ddp and the commands link
// targets.
package neuron
