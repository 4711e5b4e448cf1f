#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU and JAX's CUDA PJRT plugin
# (jax-cuda13-pjrt), what xladevices sees, the toy example trained on the
# GPU, then the benchmark steps (toy, the MNIST CNN, the small GPT,
# ResNet-18 CIFAR) of examples/bench/step beside JAX's, alternated.
#
#   make gpu-bench-bin                           # here: builds $(BIN)/gpu/*.xz
#   bash examples/bench/gpu/run.sh BIN_DIR OUT   # there
#
# BIN_DIR holds step, toy and xladevices (xz-compressed or not). Every
# command runs under a timeout; the log goes to OUT/gpu.log and each
# step's JSON line to OUT/steps.jsonl.
set -uo pipefail
bin_in=${1:?usage: run.sh BIN_DIR OUT}
out=${2:?usage: run.sh BIN_DIR OUT}
rounds=${ROUNDS:-2}
models=${MODELS:-toy cnn gpt resnet18-cifar}
mkdir -p "$out"
log="$out/gpu.log"
exec > >(tee -a "$log") 2>&1

bin=$(mktemp -d)
for f in "$bin_in"/*; do
	name=$(basename "$f" .xz)
	# Python's lzma, since the GPU image may lack xz.
	python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]) if sys.argv[1].endswith(".xz") else open(sys.argv[1], "rb"), open(sys.argv[2], "wb"))' "$f" "$bin/$name"
	chmod +x "$bin/$name"
done
peers=$(cd "$(dirname "$0")/../peers" && pwd)
export XLADDP_CACHE_DIR=$bin/cache PYTHONUNBUFFERED=1

step() { echo "== $*"; timeout "${T:-240}" "$@"; echo "== exit $?"; }

step nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
step python3 -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())'
lscpu | grep -E 'Model name|^CPU\(s\)'
T=120 step "$bin/xladevices" --device cuda
T=120 step "$bin/toy" --device cuda --spawn

for m in $models; do
	T=180 step "$bin/step" --device cuda --model "$m" --init-out "$bin/init-$m.safetensors"
done
for round in $(seq "$rounds"); do
	for m in $models; do
		echo "== round $round $m xladdp"
		T=240 timeout 240 "$bin/step" --device cuda --model "$m" --samples 7 --steps 20 --warmup 3 |
			tee -a "$out/steps.jsonl"
		echo "== round $round $m jax"
		script=step_jax.py
		[[ $m == gpt ]] && script=gpt_jax.py
		JAX_PLATFORMS=cuda timeout 240 python3 "$peers/$script" --model "$m" \
			--init "$bin/init-$m.safetensors" --samples 7 --steps 20 --warmup 3 | tee -a "$out/steps.jsonl"
	done
done
echo "== done"
