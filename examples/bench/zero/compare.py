"""ZeRO-1 against plain DDP, the way users run them: 2 processes under
ddprun, one rank per core (OMP_NUM_THREADS=1), the examples' MNIST CNN
(Adadelta) and GPT small (AdamW, clipping), alternated round by round.
Prints each run's step time and the medians' ratio (zero / plain).

    python3 examples/bench/zero/compare.py --bin bin --rounds 3
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile

JOBS = {
    # name: (example, its flags, how to read a step time in ms from its output)
    "mnist": ("mnist", ["--max-steps", "300", "--log-interval", "100"],
              lambda out: float(re.search(r"time per step over \d+ steps: .*= ([0-9.]+) ms", out).group(1))),
    "gpt": ("gpt", ["--steps", "150", "--eval-interval", "150", "--eval-iters", "1", "--sample", "0", "--log-interval", "50"],
            lambda out: 1000 * float(re.search(r"([0-9.]+)s training", out).group(1)) / 150),
}


def run(bin_dir, job, zero, nproc):
    example, flags, step_ms = JOBS[job]
    with tempfile.TemporaryDirectory() as ck:
        cmd = [os.path.join(bin_dir, "ddprun"), f"--nproc_per_node={nproc}", os.path.join(bin_dir, example),
               *flags, "--checkpoint", os.path.join(ck, "ck")] + (["--zero"] if zero else [])
        env = dict(os.environ, OMP_NUM_THREADS="1")
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return step_ms(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="bin")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--only", default="mnist,gpt")
    a = p.parse_args()
    for job in a.only.split(","):
        times = {False: [], True: []}
        for r in range(a.rounds):
            for zero in (False, True):
                ms = run(a.bin, job, zero, a.nproc)
                times[zero].append(ms)
                print(f"{job} round {r + 1} {'zero ' if zero else 'plain'}: {ms:.1f} ms/step", flush=True)
        plain, zero = statistics.median(times[False]), statistics.median(times[True])
        print(f"{job}, {a.nproc} processes: plain DDP {plain:.1f} ms/step, ZeRO-1 {zero:.1f} ms/step (medians of {a.rounds}): "
              f"zero/plain {zero / plain:.3f}", flush=True)


if __name__ == "__main__":
    main()
