"""The flight recorder's cost on the step, the way users run it: the
examples' MNIST CNN on 2 processes under ddprun, one rank per core
(OMP_NUM_THREADS=1), with the recorder on (the default) and off
(XLADDP_FLIGHT_SIZE=0), alternated round by round. Prints each run's
step time and the medians' ratio (on / off).

    python3 examples/bench/flight/overhead.py --bin bin --rounds 5
"""
import argparse
import os
import re
import statistics
import subprocess


def step_ms(bin_dir, nproc, steps, recorder_on):
    cmd = [os.path.join(bin_dir, "ddprun"), f"--nproc_per_node={nproc}", os.path.join(bin_dir, "mnist"),
           "--max-steps", str(steps), "--log-interval", "100"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if not recorder_on:
        env["XLADDP_FLIGHT_SIZE"] = "0"
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return float(re.search(r"time per step over \d+ steps: .*= ([0-9.]+) ms", out).group(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="bin")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=300)
    a = p.parse_args()
    times = {True: [], False: []}
    for r in range(a.rounds):
        for on in (False, True):
            ms = step_ms(a.bin, a.nproc, a.steps, on)
            times[on].append(ms)
            print(f"round {r + 1} recorder {'on ' if on else 'off'}: {ms:.2f} ms/step", flush=True)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print(f"MNIST, {a.nproc} processes: recorder off {off:.2f} ms/step, on {on:.2f} ms/step "
          f"(medians of {a.rounds}): on/off {on / off:.4f}", flush=True)


if __name__ == "__main__":
    main()
