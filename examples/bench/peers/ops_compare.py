"""`make bench`'s one-core per-op table: examples/bench/ops (xladdp), JAX
and PyTorch 1.13 (OpenBLAS, one thread), each pinned to CPU 0 with
taskset, at batch 32 and 64, alternating the runners round by round;
prints a markdown table of medians with each peer's time over xladdp's.

    python3 ops_compare.py --ops-bin bin/benchops --rounds 2"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = os.environ.get("XLADDP_PEERS_DIR", os.path.expanduser("~/.cache/xladdp/peers"))
OPENBLAS = {"LD_LIBRARY_PATH": "/usr/lib/x86_64-linux-gnu/openblas-pthread", "OMP_NUM_THREADS": "1"}
PIN = ["taskset", "-c", "0"]


def runners(ops_bin, batch, timing):
    b = ["--batch", str(batch)]
    return [
        ("xladdp", [*PIN, ops_bin, *b, *timing], {}),
        ("JAX", [*PIN, os.path.join(PEERS, "jax/bin/python"), os.path.join(HERE, "ops_jax.py"), *b, *timing], {}),
        ("PyTorch", [*PIN, "/usr/bin/python3", os.path.join(HERE, "ops_torch.py"), "--threads", "1", *b, *timing], OPENBLAS),
    ]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ops-bin", required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batches", default="32,64")
    p.add_argument("--samples", default="5")
    p.add_argument("--calls", default="10")
    a = p.parse_args()
    timing = ["--samples", a.samples, "--calls", a.calls]
    samples, order = {}, []
    for rnd in range(a.rounds):
        for batch in [int(b) for b in a.batches.split(",")]:
            for name, cmd, env in runners(a.ops_bin, batch, timing):
                out = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True, timeout=1800)
                if out.returncode != 0:
                    raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
                for line in out.stdout.splitlines():
                    r = json.loads(line)
                    key = (batch, r["op"], r["pass"])
                    if key not in order:
                        order.append(key)
                    samples.setdefault(key, {}).setdefault(name, []).extend(r["call_ms"])
                print(f"round {rnd + 1}: batch {batch}: {name} done", file=sys.stderr)
    print("| batch | op | pass | xladdp ms | JAX ms | PyTorch ms | JAX / xladdp | PyTorch / xladdp |")
    print("|---|---|---|---|---|---|---|---|")
    for key in order:
        med = {n: statistics.median(v) for n, v in samples[key].items()}
        ours = med.get("xladdp", float("nan"))
        cells = [f"{med[n]:.2f}" if n in med else "–" for n in ("xladdp", "JAX", "PyTorch")]
        ratios = [f"{med[n] / ours:.2f}" if n in med else "–" for n in ("JAX", "PyTorch")]
        print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells + ratios) + " |")


if __name__ == "__main__":
    main()
