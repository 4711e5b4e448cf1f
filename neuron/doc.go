// Package neuron owns everything Trainium: bootstrapping the Neuron PJRT
// plugin (libneuronpjrt.so from libneuronxla), the Neuron and EFA
// environment for multi-process and multi-node runs, instance topology, the
// compile cache and compiler flags, and preflight checks.
//
// It knows nothing of DDP internals. Not implemented yet: until the Neuron
// issue lands, backend.Open reports the neuron target as not available.
package neuron
