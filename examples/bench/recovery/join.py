"""What a joining node costs: the seed's MNIST job (--deterministic, 300
steps, a checkpoint every 100) as an elastic job on loopback
(--nnodes=2:3, one worker a node) that starts on two nodes; at a random
step between 120 and 190 a third ddprun starts. For each path, alternated
trial by trial, it reports the steps redone (the last step printed before
the job went on at three nodes, less the step it resumed at), the pause
(from the last step completed at two nodes to the first at three), the
seconds from the third node's start to the first step at three nodes,
whether the job's worker processes were kept, and checks that every job
ends with the uninterrupted weights. The paths: healing the new node from
a live peer's memory (ddprun's default) and the restart of every worker
at a checkpoint written on SIGTERM (--restart_on_peer_loss, which turns
the in-place paths off, as torchrun admits a node).

    python3 join.py --bin bin --trials 3
"""

import argparse
import os
import random
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recovery import Node, free_port, STEP, SHA  # noqa: E402

RESUMED = re.compile(r"resumed from (.+?) at step (\d+).*now 3 ")
KEPT = re.compile(r"regrouped in place with the joining node\(s\): process (\d+) goes on")


def trial(bindir, data_args, rng, launch, timeline=False):
    ck = tempfile.mkdtemp(prefix="join-ck-")
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [os.path.join(bindir, "ddprun"), "--nnodes=2:3", "--nproc_per_node=1", "--rdzv_backend=c10d",
           f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id=join-{port}", "--max_restarts=0",
           "--rdzv_conf=last_call_timeout=1"] + launch + [
           os.path.join(bindir, "mnist"), "--deterministic", "--max-steps", "300", "--checkpoint-every", "100",
           "--log-interval", "1", "--checkpoint-dir", ck] + data_args
    nodes = [Node(cmd, env)]
    time.sleep(0.5)  # node 0 hosts the store
    nodes.append(Node(cmd, env))
    at = rng.randrange(120, 190)
    deadline = time.monotonic() + 300
    last = 0
    while last < at:
        if time.monotonic() > deadline or any(n.proc.poll() is not None for n in nodes):
            raise SystemExit("the job ended or stalled before step %d:\n%s" % (at, "\n".join(l for _, l in nodes[0].snapshot()[-20:])))
        last = max([int(m.group(1)) for n in nodes for _, l in n.snapshot() if (m := STEP.search(l))] + [0])
        time.sleep(0.005)
    time.sleep(rng.random() * 0.08)  # within a step
    workers = sorted(p for n in nodes for p in n.workers())
    before = {i: len(n.snapshot()) for i, n in enumerate(nodes)}
    started = time.monotonic()
    nodes.append(Node(cmd, env))
    before[2] = 0
    for n in nodes:
        if n.proc.wait(timeout=600) != 0:
            raise SystemExit("a node failed:\n" + "\n".join(l for _, l in n.snapshot()[-30:]))
    after = sorted((t, l) for i, n in enumerate(nodes) for t, l in n.snapshot()[before[i]:])
    resume = next(((t, m) for t, l in after if (m := RESUMED.search(l))), None)
    if resume is None:
        raise SystemExit("the job did not resume at three nodes:\n" + "\n".join(l for _, l in after[-30:]))
    resumed_at, m = resume
    resumed = int(m.group(2))
    steps_before = [(t, int(s.group(1))) for t, l in after if t < resumed_at and (s := STEP.search(l))]
    last_two = max(steps_before, key=lambda ts: ts[1], default=(started, 0))
    first_three = next(t for t, l in after if t > resumed_at and (s := STEP.search(l)) and int(s.group(1)) > resumed)
    sha = next((s.group(1) for _, l in after if (s := SHA.search(l))), None)
    kept = sorted(int(k.group(1)) for _, l in after if (k := KEPT.search(l)))
    if timeline:
        for t, l in after:
            if last_two[0] - 0.001 <= t <= first_three + 0.001 and (not STEP.search(l) or t in (last_two[0], first_three)):
                print(f"  {t - last_two[0]:+7.3f} s  {l[:160]}")
    return {"redone": max(0, last_two[1] - resumed), "pause": first_three - last_two[0], "joined": first_three - started,
            "healed": m.group(1).startswith("rank "), "kept": kept == workers, "resumed": resumed, "sha": sha}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--data", default="")
    ap.add_argument("--timeline", action="store_true", help="print each trial's lines from the last step at two nodes to the first at three")
    args = ap.parse_args()
    data_args = ["--data", args.data] if args.data else []
    paths = [("heal from a live peer (default)", []), ("restart at a checkpoint (--restart_on_peer_loss)", ["--restart_on_peer_loss"])]
    rng = random.Random()
    results = {name: [] for name, _ in paths}
    for i in range(args.trials):
        for name, launch in paths:
            r = trial(args.bin, data_args, rng, launch, args.timeline)
            results[name].append(r)
            print(f"trial {i + 1} {name}: resumed at {r['resumed']} ({'from a live peer' if r['healed'] else 'from a file'}), "
                  f"{r['redone']} steps redone, paused {r['pause']:.2f} s, {r['joined']:.2f} s from the new node's start to its first step, "
                  f"weights {r['sha'][:12]}, the job's processes {'kept' if r['kept'] else 'new'}", flush=True)
    shas = {r["sha"] for rs in results.values() for r in rs}
    print("\n| path | trials | steps redone (max) | the job's pause, s (median, range) | new node's start to its first step, s (median) | healed from a peer | processes kept |")
    print("|---|---|---|---|---|---|---|")
    for name, rs in results.items():
        pause = [r["pause"] for r in rs]
        print(f"| {name} | {len(rs)} | {max(r['redone'] for r in rs)} | {statistics.median(pause):.2f} ({min(pause):.2f}–{max(pause):.2f}) | "
              f"{statistics.median(r['joined'] for r in rs):.2f} | {sum(r['healed'] for r in rs)} of {len(rs)} | {sum(r['kept'] for r in rs)} of {len(rs)} |")
    print(f"\nweights of every job: {', '.join(sorted(s[:12] for s in shas))}" + (" (one: the same bits)" if len(shas) == 1 else " (DIFFER)"))
    return 0 if len(shas) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
