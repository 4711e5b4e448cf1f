// Package neuron owns everything Trainium: bootstrapping the Neuron PJRT
// plugin (libneuronpjrt.so from libneuronxla), the Neuron and EFA
// environment for multi-process and multi-node runs, instance topology, the
// compile cache and compiler flags, and preflight checks.
//
// It knows nothing of DDP internals. It registers the neuron target's
// bootstrap with package backend when linked; package xla links it, so
// every program built on xla can open --device neuron.
package neuron
