// Package neuron owns everything Trainium: bootstrapping the Neuron PJRT
// plugin (libneuronpjrt.so from libneuronxla), the Neuron and EFA
// environment for multi-process and multi-node runs, instance topology, the
// compile cache and compiler flags, and preflight checks.
//
// It knows nothing of DDP internals. Linked, it registers the neuron
// target whole with package backend (Target: plugin bootstrap, device
// count, preflight); package targets links it and package xla links
// targets, so every program built on xla can open --device neuron.
package neuron
