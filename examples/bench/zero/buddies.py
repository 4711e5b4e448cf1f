"""What ZeRO's buddy copies cost a step, the way users run it: the
examples' MNIST CNN and GPT small with --zero on 2 processes under
ddprun, one rank per core (OMP_NUM_THREADS=1), each with --checkpoint-dir
(where a training loop turns the copies on), with the copies on (the
default) and off (XLADDP_ZERO_BUDDIES=off), alternated round by round.
Prints each run's figure and the medians' ratio (on / off).

    python3 examples/bench/zero/buddies.py --bin bin --rounds 4
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile

MODELS = {
    # model: (arguments, the figure's pattern, its unit, whether more is better)
    "mnist": (["--zero", "--epochs", "1", "--max-steps", "200", "--log-interval", "1000"],
              r"time per step over \d+ steps: .*= ([0-9.]+) ms", "ms/step", False),
    "gpt": (["--zero", "--steps", "100", "--eval-interval", "1000", "--sample", "0"],
            r"s training, ([0-9.]+) tokens/s", "tokens/s", True),
}


def run(bin_dir, model, nproc, buddies):
    args, pattern, _, _ = MODELS[model]
    ck = tempfile.mkdtemp(prefix="buddies-ck-")
    try:
        cmd = [os.path.join(bin_dir, "ddprun"), f"--nproc_per_node={nproc}", os.path.join(bin_dir, model), *args,
               "--checkpoint-dir", ck, "--checkpoint-every", "100000"]
        env = dict(os.environ, OMP_NUM_THREADS="1", XLADDP_ZERO_BUDDIES="on" if buddies else "off")
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
        return float(re.search(pattern, out).group(1))
    finally:
        shutil.rmtree(ck, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="bin")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--nproc", type=int, default=2)
    a = p.parse_args()
    for model, (_, _, unit, more_is_better) in MODELS.items():
        got = {True: [], False: []}
        for r in range(a.rounds):
            for on in (False, True):
                v = run(a.bin, model, a.nproc, on)
                got[on].append(v)
                print(f"{model} round {r + 1} buddy copies {'on ' if on else 'off'}: {v:.2f} {unit}", flush=True)
        on, off = statistics.median(got[True]), statistics.median(got[False])
        cost = off / on if more_is_better else on / off
        print(f"{model} --zero, {a.nproc} processes: buddy copies off {off:.2f} {unit}, on {on:.2f} {unit}: "
              f"a step takes {cost:.3f}x (medians of {a.rounds})", flush=True)


if __name__ == "__main__":
    main()
