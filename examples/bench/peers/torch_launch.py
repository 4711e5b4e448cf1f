"""How the PyTorch peers start: one process, or --replicas processes of
DDP over gloo that meet on a free loopback port; the first rank to fail
stops them all (gloo would wait 30 minutes). Rank 0 puts (initial loss,
step times) on the queue; main reports them as common.report does."""

import os
import socket
import time

import torch
import torch.multiprocessing as mp

import common


def main(run, args):
    """run(rank, world, port, queue) is one rank."""
    path = os.environ.get("LD_LIBRARY_PATH", "")
    blas = "OpenBLAS" if "openblas" in path else "reference BLAS" if path.endswith("/blas") else "system BLAS"
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
