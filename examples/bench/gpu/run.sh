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
# Every command runs under a timeout; the log is OUT/gpu.log, the timed
# steps OUT/steps.jsonl, the verdicts OUT/summary.txt.
set -uo pipefail
bin_in=${1:?usage: run.sh DIR OUT [--dry-run]}
out=${2:?usage: run.sh DIR OUT [--dry-run]}
dry=${3:-}
rounds=${ROUNDS:-3}
models=${MODELS:-toy cnn gpt resnet18-cifar}
here=$(cd "$(dirname "$0")" && pwd)
peers=$(cd "$here/../peers" && pwd)
mkdir -p "$out"
exec > >(tee -a "$out/gpu.log") 2>&1

# step runs a command under a timeout (T seconds), or prints it (--dry-run).
step() {
	echo "== $*"
	[[ $dry == --dry-run ]] && return 0
	timeout "${T:-240}" "$@"
	echo "== exit $?"
}

bin=$(mktemp -d)
for f in "$bin_in"/*; do
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
XLADDP_DETERMINISTIC=1 T=120 step "$bin/xladevices" --device cuda
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
		JAX_PLATFORMS=cuda T=300 step python3 "$peers/$jax" --model "$m" --init "$bin/init-$m.safetensors" \
			--samples 7 --steps 20 --warmup 3 | tee -a "$out/steps.jsonl"
	done
done
[[ $dry == --dry-run ]] || python3 "$here/summary.py" "$bin_in/cpu-reference.jsonl" "$out" | tee "$out/summary.txt"
echo "== done"
