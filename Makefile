# lazymlir: `make demo` and `make test` set up everything they need on a fresh
# machine (Debian packages, .venv, the build) and are safe to re-run.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
LLVM_BIN := /usr/lib/llvm-22/bin
APT_PACKAGES := libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools cmake ninja-build
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
STAMPS := .stamps
# pip, without the machine's notes about configured package folders it lacks.
pip_install = set -o pipefail; $(VPY) -m pip install -q $(1) 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
NATIVE_SOURCES := $(shell find CMakeLists.txt include lib tools python test -name '*.cpp' -o -name '*.h' -o -name '*.td' -o -name 'CMakeLists.txt' -o -name '*.in' 2>/dev/null) pyproject.toml

.PHONY: all demo bench test check-lit check-python conformance gpu-bundles deps build clean

all: build

demo: build
	$(VPY) examples/mnist.py

# The benchmark suite: lazymlir against eager, torch.compile and torch._lazy,
# one table on stdout, build/bench/latest.json and latest.png (bench/suite.py;
# BENCH_ARGS=--no-compile skips torch.compile's slow gcc builds).
bench: build
	$(VPY) bench/suite.py $(BENCH_ARGS)

test: build
	@set -o pipefail; status=0; \
	echo "== lit (lazymlir-opt passes and pipelines) =="; \
	$(LLVM_BIN)/lit -sv build/test 2>&1 | tail -n 25 || status=1; \
	echo "== pytest (native module and lazy device) =="; \
	$(VPY) -m pytest -q -p no:cacheprovider test/python 2>&1 | tail -n 40 || status=1; \
	exit $$status

check-lit: build
	$(LLVM_BIN)/lit -sv build/test

check-python: build
	$(VPY) -m pytest -q test/python

# PyTorch's OpInfo samples through the lazy device, against eager (tools/conformance.py):
# prints the table and writes per-op results and a summary to docs/conformance/.
conformance: build
	$(VPY) tools/conformance.py --jobs 2 --worker-log build/conformance-workers.log \
	  --out-json docs/conformance/results.json --out-md docs/conformance/summary.md \
	  --before docs/conformance/baseline-e683828.json

# The GPU check's input (tools/gpu_bundles.py): every case compiled for sm_90
# and sm_80 with its inputs and CPU references, in build/gpu-bundles (< 40 MiB);
# on a GPU machine `python3 tools/gpu_check.py build/gpu-bundles` runs it.
gpu-bundles: build
	$(VPY) tools/gpu_bundles.py build/gpu-bundles

deps: $(STAMPS)/apt $(STAMPS)/venv

# Debian's MLIR 22 (C++ API, FileCheck, lit), installed only when missing.
$(STAMPS)/apt:
	@mkdir -p $(STAMPS)
	@if ! dpkg -s $(APT_PACKAGES) >/dev/null 2>&1; then \
	  echo "Installing Debian packages: $(APT_PACKAGES)"; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $(APT_PACKAGES); \
	fi
	@touch $@

$(STAMPS)/venv: requirements.txt
	@mkdir -p $(STAMPS)
	@[ -x $(VPY) ] || $(PYTHON) -m venv $(VENV)
	$(call pip_install,--upgrade pip)
	$(call pip_install,-r requirements.txt)
	@touch $@

# scikit-build-core builds the backend library, lazymlir-opt and the
# lazymlir._native extension in build/ (incrementally) and installs the
# package in editable mode, lazymlir-opt into .venv/bin.
$(STAMPS)/build: $(STAMPS)/apt $(STAMPS)/venv $(NATIVE_SOURCES)
	$(call pip_install,--no-build-isolation --no-deps -e .)
	@touch $@

build: $(STAMPS)/build

clean:
	rm -rf build $(STAMPS)
