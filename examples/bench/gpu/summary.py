"""The GPU check's verdicts (examples/bench/gpu/run.sh): each model's
losses on the GPU against the CPU's, the deterministic GPT's two sha256,
and each model's median step beside PyTorch's and JAX's on the GPU.

    python3 summary.py CPU_REFERENCE.jsonl OUT
"""

import json
import re
import statistics
import sys
from collections import defaultdict


def lines(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.startswith("{")]
    except FileNotFoundError:
        return []


def main(reference, out):
    """Prints the verdicts and returns how many checks failed."""
    failed = 0
    cpu = {r["model"]: r for r in lines(reference)}
    gpu = {r["model"]: r for r in lines(f"{out}/losses.jsonl")}
    print("losses (initial must agree to 1e-3; final to 5% where dropout draws differ):")
    for model, c in cpu.items():
        g = gpu.get(model)
        if g is None:
            print(f"  {model}: NO LOSS on the GPU (the run failed or was skipped: see gpu.log)")
            failed += 1
            continue
        di = abs(g["initial_loss"] - c["initial_loss"]) / max(abs(c["initial_loss"]), 1e-12)
        df = abs(g["final_loss"] - c["final_loss"]) / max(abs(c["final_loss"]), 1e-12)
        verdict = "ok" if di < 1e-3 and df < 5e-2 else "DIFFERS"
        failed += verdict != "ok"
        print(f"  {model}: initial {g['initial_loss']:.6f} (cpu {c['initial_loss']:.6f}), "
              f"final {g['final_loss']:.6f} (cpu {c['final_loss']:.6f}, {df:.2%}): {verdict}")
    shas = []
    for run in (1, 2):
        try:
            m = re.search(r"weights sha256 (\w+)", open(f"{out}/deterministic-{run}.txt").read())
            shas.append(m.group(1) if m else None)
        except FileNotFoundError:
            shas.append(None)
    same = shas[0] is not None and shas[0] == shas[1]
    failed += not same
    print(f"deterministic GPT twice: {shas[0]} {shas[1]}: {'one sha256' if same else 'DIFFERENT or missing'}")
    steps = defaultdict(list)
    for r in lines(f"{out}/steps.jsonl"):
        steps[(r["model"], r["runner"])].append(r["median_step_ms"])
    print("median step on the GPU, ms (median of rounds), ratio = peer / xladdp:")
    for model in sorted({m for m, _ in steps}):
        ours = statistics.median(steps.get((model, "xladdp"), [float("nan")]))
        row = [f"xladdp {ours:.3f}"]
        for runner in ("torch", "jax"):
            if (model, runner) in steps:
                theirs = statistics.median(steps[(model, runner)])
                row.append(f"{runner} {theirs:.3f} ({theirs / ours:.2f}x)")
        print(f"  {model}: " + ", ".join(row))
    print(f"{failed} check(s) failed" if failed else "every check passed")
    return failed


if __name__ == "__main__":
    sys.exit(1 if main(sys.argv[1], sys.argv[2]) else 0)
