"""The per-op table of `make bench`: runs examples/bench/ops (xladdp,
compiled step) and ops_jax.py alternately for --rounds rounds and prints
each op's median forward+backward time per call and the ratio."""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
JAX = os.path.expanduser("~/.cache/xladdp/peers/jax/bin/python")


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ops-bin", required=True)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    runners = [("xladdp", [a.ops_bin]), ("jax", [JAX, os.path.join(HERE, "ops_jax.py")])]
    samples, names, order = {}, {}, []
    for r in range(a.rounds):
        for key, cmd in runners:
            for res in run(cmd):
                if res["op"] not in order:
                    order.append(res["op"])
                samples.setdefault((res["op"], key), []).extend(res["call_ms"])
                names[key] = res["runner"]
                print(f"round {r + 1}: {res['op']}: {res['runner']}: median {res['median_ms']:.4g} ms", file=sys.stderr)
    print(f"| op (forward + backward, batch 64) | {names['xladdp']} ms | {names['jax']} ms | xladdp / JAX |")
    print("|---|---|---|---|")
    for op in order:
        ours = statistics.median(samples[(op, "xladdp")])
        theirs = statistics.median(samples[(op, "jax")])
        print(f"| {op} | {ours:.4g} | {theirs:.4g} | {ours / theirs:.2f}x |")


if __name__ == "__main__":
    main()
