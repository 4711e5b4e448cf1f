// Package regroup is a ddprun worker's live continuation after a peer's
// loss, on the host path: it counts how a process's replicas ended a
// pass of the training function (Ends: every one committed the last step
// it completed?), and places the process in the job again without the
// lost node (InPlace: its note to the agent, the agent's assignment
// awaited in the regroup directory, the environment set by it), so that
// ddp.Run runs the function again in the same process. A process that
// held a step in memory for a node joining the job regroups the same way,
// with that node (Active says whether the pass may).
//
// It knows nothing of devices, models or checkpoints: a replica's end is
// an error that says it committed (CommittedOnPeerLoss), and the next
// place is the worker environment ddprun writes.
package regroup
