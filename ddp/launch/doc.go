// Package launch is xladdp's torchrun: the agent that starts a training
// binary's worker processes on a node with torch's worker environment
// (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...), meets the agents of
// the other nodes through a rendezvous store, watches its workers and
// applies the failure policy (stop every worker on every node, then
// restart the group or exit with the failed worker's status), and fills
// what the command line leaves out from the cluster's environment
// (SageMaker, SLURM, PBS, Kubeflow, Open MPI). One loop (Run) applies the
// restart and preemption policy to a workerStarter: the agent's own
// workers after a meeting (standalone, or the rendezvous store), or, with
// the mpi backend, one node's workers under mpirun (mpi.go). Command
// ddprun (cmd/ddprun) is its command line, which accepts torchrun's. It
// knows nothing of PJRT or lazy tensors, and Trainium only through the
// pure-Go neuron/trn.
package launch
