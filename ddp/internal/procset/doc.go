// Package procset supervises the processes of a job as ddprun supervises
// its workers and ddp.Spawn its processes: each in its own process group,
// killed if the supervisor dies, its output copied line by line through
// pipes of its own (a grandchild holding them cannot keep the supervisor
// waiting), stopped together (SIGTERM, SIGCONT, then SIGKILL after a
// grace), and a job all ended with 0 or 75 told as preempted.
//
// It knows nothing of ranks' meaning, rendezvous, flight records or
// devices: ddp/launch and ddp build those on it.
package procset
