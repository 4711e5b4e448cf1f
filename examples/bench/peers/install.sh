#!/usr/bin/env bash
# Installs the peers `make bench` compares against, each only if missing:
#   JAX 0.12 (jax + jaxlib, CPU) in a Python >= 3.12 venv,
#   torch 2.9.0 + torch-xla 2.9.0 (PJRT CPU) in a venv (torch pulls its
#     nvidia-*-cu12 runtime wheels even for CPU use: ~7 GB),
#   PyTorch 1.13 from Debian (python3-torch) with libopenblas0-pthread and
#     libblas3 (the reference BLAS), chosen per run with LD_LIBRARY_PATH.
# Prints nothing but progress; fails with what to do.
set -euo pipefail
PEERS="${XLADDP_PEERS_DIR:-$HOME/.cache/xladdp/peers}"
mkdir -p "$PEERS"
fail() { echo "peers: $*" >&2; exit 1; }

python312() {
	for p in python3.13 python3.12 "$HOME/.pyenv/versions/3.12.1/bin/python3" "$HOME/.pyenv/versions/3.13.0/bin/python3"; do
		if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
			command -v "$p"
			return
		fi
	done
	fail "JAX 0.12 needs Python >= 3.12: install one (pyenv install 3.12) and retry"
}

if ! "$PEERS/jax/bin/python" -c 'import jax, sys; sys.exit(not jax.__version__.startswith("0.12"))' 2>/dev/null; then
	echo "peers: installing JAX 0.12 into $PEERS/jax"
	"$(python312)" -m venv "$PEERS/jax"
	"$PEERS/jax/bin/pip" install --quiet "jax==0.12.*" "jaxlib==0.12.*" numpy || fail "pip install jax==0.12.* failed (needs PyPI)"
fi

if ! "$PEERS/torchxla/bin/python" -c 'import torch_xla, sys; sys.exit(not torch_xla.__version__.startswith("2.9"))' 2>/dev/null; then
	echo "peers: installing torch 2.9.0 + torch-xla 2.9.0 into $PEERS/torchxla (about 7 GB)"
	"$(python312)" -m venv "$PEERS/torchxla"
	"$PEERS/torchxla/bin/pip" install --quiet torch==2.9.0 torch-xla==2.9.0 numpy || fail "pip install torch-xla==2.9.0 failed (needs PyPI and ~7 GB of disk)"
fi
# safetensors: torch reads the ZeRO checkpoint consolidated for it.
if ! "$PEERS/torchxla/bin/python" -c 'import safetensors.torch' 2>/dev/null; then
	"$PEERS/torchxla/bin/pip" install --quiet safetensors || fail "pip install safetensors failed (needs PyPI)"
fi

DEBIAN_PACKAGES="python3-torch libopenblas0-pthread libblas3"
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null || [[ ! -e /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 ]] \
	|| [[ ! -e /usr/lib/x86_64-linux-gnu/blas/libblas.so.3 ]]; then
	echo "peers: installing $DEBIAN_PACKAGES from Debian"
	[[ $(id -u) == 0 ]] || fail "installing Debian packages needs root: sudo apt-get install $DEBIAN_PACKAGES"
	if ! apt-get install -y -q $DEBIAN_PACKAGES >/dev/null 2>&1; then
		apt-get update -q >/dev/null
		apt-get install -y -q $DEBIAN_PACKAGES >/dev/null || fail "apt-get install $DEBIAN_PACKAGES failed"
	fi
fi
echo "peers: JAX $("$PEERS/jax/bin/python" -c 'import jax; print(jax.__version__)'), torch-xla $("$PEERS/torchxla/bin/python" -c 'import torch_xla; print(torch_xla.__version__)' 2>/dev/null), Debian torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
