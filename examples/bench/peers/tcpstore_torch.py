"""torch's TCPStore at N clients, as init_process_group meets through it.

The store's server (the libuv one, torch's default since 2.4) listens
first, as rank 0's does before the others connect; then each of N threads
is one rank: it creates its TCPStore client as torch's env:// rendezvous
does and meets the others in torch's own store-based barrier
(distributed_c10d._store_based_barrier). (Clients that race a server not
yet listening retry after backoffs that cost up to 10 s: that is not the
store's speed, so the server starts first here, as in the ranks' case.)
Prints one JSON line: the clients, the seconds from the start to the last
rank through the barrier, and the process's peak RSS (server and clients
together).

usage: tcpstore_torch.py N
"""
import json
import resource
import socket
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    n = int(sys.argv[1])
    port = free_port()
    timeout = timedelta(seconds=600)
    server = dist.TCPStore("127.0.0.1", port, n, is_master=True, timeout=timeout, wait_for_workers=False,
                           use_libuv=True, multi_tenant=True)
    go = threading.Barrier(n + 1)
    errors, stores = [], [None] * n

    def rank(r):
        try:
            go.wait()
            stores[r] = dist.TCPStore("127.0.0.1", port, n, is_master=False, timeout=timeout,
                                      use_libuv=True, multi_tenant=True)
            c10d._store_based_barrier(r, stores[r], "fleet", n, timeout)
        except Exception as e:  # noqa: BLE001 - reported, then the run fails
            errors.append(f"rank {r}: {e}")

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    start = time.perf_counter()
    go.wait()
    for t in threads:
        t.join()
    took = time.perf_counter() - start
    del server
    if errors:
        sys.exit("; ".join(errors[:3]))
    print(json.dumps({"peer": "torch " + torch.__version__ + " TCPStore (libuv)", "clients": n, "seconds": took,
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
