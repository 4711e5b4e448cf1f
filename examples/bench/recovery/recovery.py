"""What a lost node costs: the seed's MNIST job (--deterministic, 300
steps, a checkpoint every 100) as an elastic job of three ddprun nodes on
loopback (--nnodes=2:3, one worker each, --max_restarts=3); at a random
step between 120 and 190 node 1 or 2 is killed (kill -9 of its ddprun and
worker). For each build given, alternated trial by trial, it reports the
steps redone (the last step rank 0 printed before the kill, less the step
the job resumed at) and the seconds from the kill to the next step
completed after the restart, medians over the trials, and checks that
every job ends with the uninterrupted weights. The paths: the survivors
going on in the same processes (live continuation, ddprun's default),
committing and restarting (--restart_on_peer_loss), and, with
--baseline-bin, the periodic-checkpoint restart; the table says when
ddprun said how it goes on and when rank 0 said where it resumed, and
whether the survivors' worker processes were kept.

    python3 recovery.py --bin bin --baseline-bin /tmp/base/bin --trials 3
    python3 recovery.py --bin bin --zero --trials 3

With --zero the job shards its Adadelta state (mnist --zero), and the two
paths are this build with its buddy copies (the survivors hold the lost
node's shards) and with XLADDP_ZERO_BUDDIES=off (the periodic-checkpoint
restart).

--baseline-bin is a build of the same binaries from before the commit on
a peer's loss (git worktree add /tmp/base 467abbe; make -C /tmp/base bin/mnist
bin/ddprun, or go build -o bin/ ./examples/mnist ./cmd/ddprun there): the
periodic-checkpoint restart."""

import argparse
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

STEP = re.compile(r"step (\d+)/(\d+) loss")
RESUMED = re.compile(r"resumed from \S+ at step (\d+)")
SHA = re.compile(r"weights sha256 ([0-9a-f]{64})")
REGROUPED = re.compile(r"regrouped in place without the lost peer: process (\d+) goes on")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """One ddprun, its output lines timestamped as they come."""

    def __init__(self, cmd, env):
        self.lines = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append((time.monotonic(), line.rstrip("\n")))

    def snapshot(self):
        with self.lock:
            return list(self.lines)

    def workers(self):
        return [int(k) for k in subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()]

    def kill(self):
        for pid in [self.proc.pid] + self.workers():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def trial(bindir, data_args, rng, extra_env, launch):
    ck = tempfile.mkdtemp(prefix="recovery-ck-")
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", **extra_env)
    cmd = [os.path.join(bindir, "ddprun"), "--nnodes=2:3", "--nproc_per_node=1", "--rdzv_backend=c10d",
           f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id=recovery-{port}", "--max_restarts=3"] + launch + [
           os.path.join(bindir, "mnist"), "--deterministic", "--max-steps", "300", "--checkpoint-every", "100",
           "--log-interval", "1", "--checkpoint-dir", ck] + data_args
    nodes = [Node(cmd, env)]
    time.sleep(0.5)  # node 0 hosts the store
    nodes += [Node(cmd, env), Node(cmd, env)]
    at = rng.randrange(120, 190)
    deadline = time.monotonic() + 300
    last = 0
    while last < at:
        if time.monotonic() > deadline or any(n.proc.poll() is not None for n in nodes):
            raise SystemExit("the job ended or stalled before step %d:\n%s" % (at, "\n".join(l for _, l in nodes[0].snapshot()[-20:])))
        for n in nodes:
            for _, line in n.snapshot():
                m = STEP.search(line)
                if m:
                    last = max(last, int(m.group(1)))
        time.sleep(0.005)
    time.sleep(rng.random() * 0.08)  # within a step
    victim = rng.choice([1, 2])
    before = {i: len(n.snapshot()) for i, n in enumerate(nodes)}
    survivors = sorted(p for i, n in enumerate(nodes) if i != victim for p in n.workers())
    killed = time.monotonic()
    nodes[victim].kill()
    done_before = max([int(m.group(1)) for n in nodes for _, l in n.snapshot() if (m := STEP.search(l))] + [0])
    for i, n in enumerate(nodes):
        if i != victim:
            if n.proc.wait(timeout=600) != 0:
                raise SystemExit("a survivor failed:\n" + "\n".join(l for _, l in n.snapshot()[-30:]))
    after = sorted((t, l) for i, n in enumerate(nodes) if i != victim for t, l in n.snapshot()[before[i]:])
    resumed = next((int(m.group(1)) for _, l in after if (m := RESUMED.search(l))), None)
    if resumed is None:
        raise SystemExit("the job did not resume:\n" + "\n".join(l for _, l in after[-30:]))
    seen_resume = False
    next_step = regained = None
    for t, l in after:
        if RESUMED.search(l):
            seen_resume = True
        m = STEP.search(l)
        if seen_resume and m and int(m.group(1)) > resumed and next_step is None:
            next_step = t
        if seen_resume and m and int(m.group(1)) > done_before:
            regained = t
            break
    sha = next((m.group(1) for _, l in after if (m := SHA.search(l))), None)
    said = next((t for t, l in after if "(restart 1 of" in l), killed)
    resumed_at = next((t for t, l in after if RESUMED.search(l)), said)
    regrouped = sorted(int(m.group(1)) for _, l in after if (m := REGROUPED.search(l)))
    return {"same_pids": regrouped == survivors, "said": said - killed, "resumed_line": resumed_at - killed, "redone": max(0, done_before - resumed), "seconds": next_step - killed, "regained": regained - killed, "resumed": resumed,
            "killed_after": done_before, "sha": sha}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--baseline-bin")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--data", default="")
    ap.add_argument("--zero", action="store_true", help="mnist --zero: buddy copies on against XLADDP_ZERO_BUDDIES=off")
    args = ap.parse_args()
    data_args = ["--data", args.data] if args.data else []
    restart = ["--restart_on_peer_loss"]
    builds = [("live continuation", args.bin, {}, []), ("commit and restart (--restart_on_peer_loss)", args.bin, {}, restart)]
    builds += [("periodic checkpoint", args.baseline_bin, {}, [])] if args.baseline_bin else []
    if args.zero:
        data_args.append("--zero")
        builds = [("ZeRO, live continuation (buddy copies)", args.bin, {"XLADDP_ZERO_BUDDIES": "on"}, []),
                  ("ZeRO, commit and restart (buddy copies)", args.bin, {"XLADDP_ZERO_BUDDIES": "on"}, restart),
                  ("ZeRO, periodic checkpoint (XLADDP_ZERO_BUDDIES=off)", args.bin, {"XLADDP_ZERO_BUDDIES": "off"}, restart)]
    rng = random.Random()
    results = {name: [] for name, _, _, _ in builds}
    for i in range(args.trials):
        for name, bindir, extra_env, launch in builds:
            r = trial(bindir, data_args, rng, extra_env, launch)
            results[name].append(r)
            print(f"trial {i + 1} {name}: killed after step {r['killed_after']}, resumed at {r['resumed']}, "
                  f"{r['redone']} steps redone, {r['seconds']:.2f} s to the next step, {r['regained']:.2f} s to a step past the kill's, "
                  f"(ddprun's word at {r['said']:.2f} s, the resumed line at {r['resumed_line']:.2f} s), "
                  f"weights {r['sha'][:12]}, survivors' processes {'kept' if r['same_pids'] else 'new'}", flush=True)
    shas = {r["sha"] for rs in results.values() for r in rs}
    print("\n| path | trials | steps redone (median, max) | kill to the next step, s (median, range) | kill to a step past the kill's, s (median) | kill to ddprun's word / to the resumed line, s (medians) | survivors' processes kept |")
    print("|---|---|---|---|---|---|---|")
    for name, rs in results.items():
        red = [r["redone"] for r in rs]
        sec = [r["seconds"] for r in rs]
        reg = statistics.median(r["regained"] for r in rs)
        print(f"| {name} | {len(rs)} | {statistics.median(red):g}, {max(red)} | {statistics.median(sec):.2f} ({min(sec):.2f}–{max(sec):.2f}) | {reg:.2f} | {statistics.median(r['said'] for r in rs):.2f} / {statistics.median(r['resumed_line'] for r in rs):.2f} | {sum(r['same_pids'] for r in rs)} of {len(rs)} |")
    print(f"\nweights of every job: {', '.join(sorted(s[:12] for s in shas))}" + (" (one: the same bits)" if len(shas) == 1 else " (DIFFER)"))
    return 0 if len(shas) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
