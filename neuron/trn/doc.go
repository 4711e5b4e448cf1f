// Package trn holds the facts of Trainium, in pure Go so that the
// launcher (ddprun, its doctor and preflight) can know them without the
// Neuron plugin's cgo bootstrap: instance types and their topology
// (DetectInstance, Validate), the NeuronCore count a launcher gives a job
// and the /dev/neuronN devices, the processes holding them, the EFA and
// memlock checks of a multi-node job, the per-process environment the
// Neuron runtime and plugin need (Environment, computed as torch-xla's
// neuron.py computes it), and every NEURON_* and FI_* variable name.
//
// It knows nothing of PJRT, lazy tensors or process groups; package
// neuron, which loads the plugin, and ddp/launch build on it.
package trn
