// Package preflight finds what stops a job before it starts, on this
// host: a port another process listens on (and which process), a
// rendezvous host that does not resolve or answer, a memlock limit or a
// /dev/shm too small, NeuronCores another process holds. Each check reads
// the kernel's tables under /proc and /sys, so it costs milliseconds; ddprun
// runs them before a launch (--check) and as `ddprun doctor`.
package preflight
