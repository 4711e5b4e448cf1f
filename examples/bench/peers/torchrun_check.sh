#!/usr/bin/env bash
# Runs a Go training binary's workers under real torchrun (torch 2.9, from
# the peers' torch-xla venv; install.sh makes it): one node with 2 workers,
# then two torchrun agents as nodes on loopback. torchrun's agent hosts a
# c10d TCPStore on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True) and the
# workers join it through ddp/store.TorchClient.
#
#   bash examples/bench/peers/torchrun_check.sh bin/toy
set -euo pipefail
bin="${1:?usage: torchrun_check.sh TRAINING_BINARY}"
peers="${XLADDP_PEERS_DIR:-$HOME/.cache/xladdp/peers}"
torchrun="$peers/torchxla/bin/torchrun"
[[ -x "$torchrun" ]] || { echo "torchrun_check: $torchrun is missing: run bash examples/bench/peers/install.sh" >&2; exit 1; }
"$peers/torchxla/bin/python" -c 'import torch; print("torchrun_check: torch", torch.__version__)'

out="$(mktemp)"
trap 'rm -f "$out"' EXIT
echo "torchrun_check: 1 node x 2 workers"
"$torchrun" --nproc_per_node=2 --no-python "$bin" >"$out" 2>&1 || { cat "$out"; exit 1; }
grep -q "Loss after step 100" "$out" || { cat "$out"; echo "torchrun_check: no Loss after step 100" >&2; exit 1; }
grep "Loss after step 100" "$out"

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
echo "torchrun_check: 2 nodes x 2 workers (static ranks, loopback, port $port)"
for node in 0 1; do
	"$torchrun" --nnodes=2 --nproc_per_node=2 --node_rank=$node --master_addr=127.0.0.1 --master_port="$port" \
		--no-python "$bin" >"$out.$node" 2>&1 &
done
status=0
wait || status=$?
cat "$out.0" "$out.1" | grep "Loss after step 100" || status=1
if ((status)); then cat "$out.0" "$out.1"; fi
rm -f "$out.0" "$out.1"
exit $status
