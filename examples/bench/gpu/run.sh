#!/usr/bin/env bash
# The GPU check, one call on a machine with an NVIDIA GPU, JAX's CUDA PJRT
# plugin (jax-cuda13-pjrt) and PyTorch, which reaches no registry:
#
#   make device-check                              # here: builds .gpu/ (at most 64 MiB) and dry-runs this
#   bash examples/bench/gpu/run.sh .gpu OUT        # there (the device tool: carry .gpu, OUT=$OUT)
#   bash examples/bench/gpu/run.sh .gpu OUT --dry-run   # prints what it would run
#
# .gpu holds step, toy, gpt and xladevices (xz-compressed), corpus.txt (the
# GPT's text) and cpu-reference.jsonl (each model's losses on this CPU).
# There it runs: what xladevices sees, plain and deterministic (XLA_FLAGS
# with --xla_gpu_deterministic_ops); the toy; each model's losses against
# the CPU run (toy, the MNIST CNN, the GPT, ResNet-18 CIFAR); the GPT
# --deterministic twice, which must give one sha256; then the steps timed
# beside the image's PyTorch (and JAX where it imports), alternated.
# It fits the device tool's limits (10 minutes a command, 15 minutes of
# device time a session): the whole run has a budget (BUDGET seconds,
# default 540), each command a timeout within what is left, and what the
# budget does not reach is skipped and said; the verdicts are written
# however the run ends. ROUNDS (default 1) sets the timed rounds. The
# log is OUT/gpu.log, the verdicts OUT/summary.txt (summary.py exits 1
# where a loss differs, a model gave none, or the two sha256 differ).
set -uo pipefail
bin_in=${1:?usage: run.sh DIR OUT [--dry-run]}
out=${2:?usage: run.sh DIR OUT [--dry-run]}
dry=${3:-}
rounds=${ROUNDS:-1}
budget=${BUDGET:-540}
models=${MODELS:-toy cnn gpt resnet18-cifar}
here=$(cd "$(dirname "$0")" && pwd)
peers=$(cd "$here/../peers" && pwd)
mkdir -p "$out"
rm -f "$out"/gpu.log "$out"/losses.jsonl "$out"/steps.jsonl "$out"/deterministic-*.txt "$out"/summary.txt
exec > >(tee -a "$out/gpu.log") 2>&1
deadline=$((SECONDS + budget))

# step runs a command (env assignments written as `env A=B cmd`) under a
# timeout of T seconds or what is left of the budget, or prints it
# (--dry-run); past the budget it says the command was skipped.
step() {
	if [[ $dry == --dry-run ]]; then
		echo "== $*"
		return 0
	fi
	local left=$((deadline - SECONDS))
	if ((left < 10)); then
		echo "== skipped (the ${budget} s budget is spent): $*"
		return 0
	fi
	echo "== $*"
	timeout "$((${T:-240} < left ? ${T:-240} : left))" "$@"
	echo "== exit $?"
}

bin=$(mktemp -d)
verdicts() {
	local rc=0
	if [[ $dry != --dry-run ]]; then
		python3 "$here/summary.py" "$bin_in/cpu-reference.jsonl" "$out" | tee "$out/summary.txt"
		rc=${PIPESTATUS[0]}
	fi
	rm -rf "$bin"
	exit "$rc"
}
trap verdicts EXIT
for f in "$bin_in"/*; do
	[[ $dry == --dry-run ]] && break
	name=$(basename "$f" .xz)
	if [[ $f == *.xz ]]; then
		# Python's lzma: the GPU image may lack xz.
		python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$f" "$bin/$name"
		chmod +x "$bin/$name"
	else
		cp "$f" "$bin/$name"
	fi
done
export XLADDP_CACHE_DIR=$bin/cache PYTHONUNBUFFERED=1

step nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
step python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
step python3 -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())'
lscpu | grep -E 'Model name|^CPU\(s\)'
T=120 step "$bin/xladevices" --device cuda
T=120 step env XLADDP_DETERMINISTIC=1 "$bin/xladevices" --device cuda
T=180 step "$bin/toy" --device cuda --spawn

echo "== losses on the GPU against the CPU's (cpu-reference.jsonl: the same seed, steps and batches)"
for m in $models; do
	T=300 step "$bin/step" --device cuda --model "$m" --samples 1 --steps 10 --warmup 0 --seed 1 |
		tee -a "$out/losses.jsonl"
done

echo "== the GPT --deterministic twice on the GPU: one sha256"
for run in 1 2; do
	T=300 step "$bin/gpt" --spawn --device cuda --deterministic --micro-shard 8 --steps 30 --eval-interval 30 --sample 0 \
		--data "$bin/corpus.txt" | tee "$out/deterministic-$run.txt"
done

echo "== timed steps, alternated: xladdp, PyTorch (cuda), JAX (cuda)"
for m in $models; do
	T=180 step "$bin/step" --device cuda --model "$m" --init-out "$bin/init-$m.safetensors"
done
for round in $(seq "$rounds"); do
	for m in $models; do
		T=300 step "$bin/step" --device cuda --model "$m" --samples 7 --steps 20 --warmup 3 | tee -a "$out/steps.jsonl"
		torch=step_torch.py jax=step_jax.py
		[[ $m == gpt ]] && torch=gpt_torch.py jax=gpt_jax.py
		T=300 step python3 "$peers/$torch" --device cuda --model "$m" --init "$bin/init-$m.safetensors" \
			--samples 7 --steps 20 --warmup 3 | tee -a "$out/steps.jsonl"
		T=300 step env JAX_PLATFORMS=cuda python3 "$peers/$jax" --model "$m" --init "$bin/init-$m.safetensors" \
			--samples 7 --steps 20 --warmup 3 | tee -a "$out/steps.jsonl"
	done
done
echo "== done"
