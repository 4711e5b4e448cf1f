// Package procfs reads who holds what on this host from /proc: the
// processes with a file open (a device, a socket) and their command
// lines. The Neuron preflight and ddprun's doctor share it.
package procfs
