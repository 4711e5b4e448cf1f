// Package dist is the process group, torch.distributed's core: processes
// that rendezvous through a store (package ddp/store) and run collectives
// together. It knows nothing of devices or PJRT (package ddp builds the
// data-parallel wrapper, the sampler, checkpoints and the launch modes on
// top of it).
//
// # Process groups
//
// InitProcessGroup (or Init for the default group, torch's
// init_process_group) takes torch's init methods: env:// (MASTER_ADDR,
// MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), tcp://host:port
// and file:///shared/path. Rank 0 hosts the TCP store. Ranks register
// uniquely (a duplicate RANK fails both claimants at once, naming both
// processes), agree on the world size, and connect in a full mesh of TCP
// connections, authenticated with XLADDP_STORE_TOKEN when set. A world that
// does not fill in time fails with the missing ranks named; cancelling the
// ctx ends the rendezvous at any stage.
//
// # Collectives
//
// AllReduce (Sum, Avg, Min, Max, Product), Broadcast, AllGather,
// ReduceScatter, AllToAllSingle (split sizes), Gather, Scatter, Barrier and
// tagged Send/Recv work on Buffer views of float32, float64, bfloat16,
// int32 and int64 slices, in place, with Async variants returning a Work.
// Operations run in issue order on one executor goroutine, or on the
// caller's when the transport allows and nothing is queued. On the tcp
// transport all-reduce picks its path by size and placement: small
// buffers go to every rank in one round (on one host, through shared
// memory with no frame, syscall or goroutine hand-off); larger ones send
// each rank its chunk, which it folds, then gather the chunks on a ring
// (the bytes of a ring all-reduce), pipelined in 1 MiB pieces over the
// TCP connections, or, when every rank is on this host, use shared memory
// (a /dev/shm segment reserved up front; buffers from SharedBuffer are
// reduced in place, others staged). Every rank gets a bitwise-identical
// result, and every path (ReduceScatter too) adds the ranks' values in
// rank order; on the mpi backend XLADDP_MPI_REDUCE_ORDER=rank does.
//
// Every operation has a timeout (Options.Timeout). A rank that dies is
// seen at once through its closed connections; a stalled one when the
// timeout passes. The first failure breaks the group: every rank is sent
// the cause, so ranks waiting on someone else still fail promptly, with a
// PeerError naming the rank at fault. A Wait whose ctx ends breaks the
// group too, and returns only once the operation has let go of the
// buffer. Destroy fails the operations still queued or running with
// ErrGroupClosed.
//
// Every frame carries a descriptor of its operation (kind, dtype, length,
// reduce op, root), checked on receipt, and the send-only side of a rooted
// collective waits for an acknowledgement: ranks that disagree fail at
// once on every path. With XLADDP_DISTRIBUTED_DEBUG=1, ranks also compare a full
// fingerprint of each collective before running it, and the error lists
// each rank's call. Point-to-point operations are numbered apart from the
// collectives, which every rank numbers alike.
//
// # Transports
//
// The group validates each operation, numbers, orders and times it, owns
// its Work, the group's broken and closed states and Avg's division; a
// transport (package ddp/internal/transport's interface, registered by
// name) only carries it. The transport above is the default backend,
// "tcp" (package ddp/internal/tcp). With Options.Transport "mpi"
// ($XLADDP_BACKEND; a build with -tags mpi, started by mpirun) every
// operation runs through MPI instead (package ddp/internal/mpiengine over
// the binding, ddp/mpi): the ranks come from MPI, collectives are MPI's
// blocking calls in issue order (inline, or on the executor for the Async
// variants), Send and Recv are MPI_Isend and MPI_Irecv, and a watchdog
// aborts the job (MPI_Abort) when an operation outlives its timeout or a
// peer that left the group leaves it unable to finish.
package dist
