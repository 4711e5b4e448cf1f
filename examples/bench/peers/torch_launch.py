"""How the PyTorch peers start and time their steps: one process, or
--replicas processes of DDP over gloo that meet on a free loopback port;
the first rank to fail stops them all (gloo would wait 30 minutes). Rank 0
puts (initial loss, step times) on the queue; main reports them as
common.report does."""

import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import common


def main(run, args):
    """run(rank, world, port, queue) is one rank."""
    path = os.environ.get("LD_LIBRARY_PATH", "")
    blas = ("OpenBLAS" if "openblas" in path else "reference BLAS" if path.endswith("/blas")
            else "MKL" if torch.backends.mkl.is_available() else "system BLAS")
    name = f"torch {torch.__version__} eager ({blas})"
    if args.replicas == 1:
        import queue as q

        out = q.Queue()
        run(0, 1, 0, out)
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ctx = mp.get_context("spawn")
        out = ctx.SimpleQueue()
        procs = [ctx.Process(target=run, args=(r, args.replicas, port, out)) for r in range(args.replicas)]
        for p in procs:
            p.start()
        while any(p.is_alive() for p in procs):
            failed = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if failed:
                for p in procs:
                    p.terminate()
                raise SystemExit(f"torch DDP rank {failed[0]} exited with {procs[failed[0]].exitcode}")
            time.sleep(0.05)
        for r, p in enumerate(procs):
            if p.exitcode != 0:
                raise SystemExit(f"torch DDP rank {r} exited with {p.exitcode}")
        name = f"torch {torch.__version__} DDP gloo ({blas})"
    initial, times = out.get()
    common.report(name, args, initial, times)


def wrap(net, rank, world, port):
    """net itself alone, else net in DDP over gloo with the other ranks."""
    if world == 1:
        return net
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return torch.nn.parallel.DistributedDataParallel(net)


def timed(step, args, rank, world, initial, queue):
    """Runs --warmup steps, then --samples timed runs of --steps steps
    (the ranks meet before each), and rank 0 queues the per-step times."""
    # On a GPU the steps are queued: a sample ends when the device is done.
    sync = torch.cuda.synchronize if getattr(args, "device", "cpu") == "cuda" else (lambda: None)
    for _ in range(args.warmup):
        step()
    sync()
    times = []
    for _ in range(args.samples):
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        sync()
        times.append((time.perf_counter() - start) * 1000 / args.steps)
    if world > 1:
        dist.destroy_process_group()
    if rank == 0:
        queue.put((initial, times))
