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
NATIVE_SOURCES := $(shell find CMakeLists.txt include lib tools python test -name '*.cpp' -o -name '*.h' -o -name '*.inc' -o -name '*.td' -o -name 'CMakeLists.txt' -o -name '*.in' 2>/dev/null) pyproject.toml

.PHONY: all demo bench test test-slow lint format check-lit check-python conformance gpu-bundles deps build clean stress asan asan-build wheel wheel-check

all: build

demo: build
	$(VPY) examples/mnist.py

# The benchmark suite: lazymlir against eager, torch.compile and torch._lazy,
# one table on stdout, build/bench/latest.json and latest.png (bench/suite.py;
# BENCH_ARGS=--no-compile skips torch.compile's slow gcc builds).
bench: build
	$(VPY) bench/suite.py $(BENCH_ARGS)

# The tests in two tiers: `make test` (lit, then pytest without the tests
# marked slow: ~8 min on 2 cores once built) and `make test-slow` (the
# subprocess-heavy ones: bench smoke runs, disk-cache processes, memory
# soaks; ~7 min). CI (.ci/run) runs lint and both.
test: build
	@set -o pipefail; status=0; \
	echo "== lit (lazymlir-opt passes and pipelines) =="; \
	$(LLVM_BIN)/lit -sv build/test 2>&1 | tail -n 25 || status=1; \
	echo "== pytest (native module and lazy device; make test-slow: the slow tier) =="; \
	$(VPY) -m pytest -q -p no:cacheprovider -m "not slow" test/python 2>&1 | tail -n 40 || status=1; \
	exit $$status

test-slow: build
	@set -o pipefail; echo "== pytest, slow tier =="; \
	$(VPY) -m pytest -q -p no:cacheprovider -m slow test/python 2>&1 | tail -n 40

# Lint (run by .ci/run before the tests): ruff's checks and formatter over
# the Python (pyproject.toml's [tool.ruff]), clang-format over the C++ (the
# .clang-format files: LLVM's style on the MLIR side, Google's at 120
# columns in python/lazymlir/frontend/csrc). `make format` rewrites the tree.
CXX_SOURCES = $(shell find lib include tools python -name '*.cpp' -o -name '*.h' -o -name '*.inc' | sort)
lint: $(STAMPS)/venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/clang-format --dry-run -Werror $(CXX_SOURCES)

format: $(STAMPS)/venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	$(VENV)/bin/clang-format -i $(CXX_SOURCES)

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

# Start-up stress (issue 29, not part of `make test`): 50 fresh processes, 2
# at a time, each training BERT for a few steps from an empty compile cache
# (tools/stress.py); exits 1 if any aborted or crashed, with its stderr tail
# and, from its core, gdb's backtrace of every thread (kept in build/stress).
# STRESS_ARGS, e.g. --processes 200, or --env MALLOC_PERTURB_=165 --env
# GLIBC_TUNABLES=glibc.malloc.tcache_count=0 (freed memory poisoned: a read
# after free crashes at once instead of now and then). STRESS_ARGS=--short
# (issue 47): short processes instead (a small MLP, 4 Adam steps, float(loss)
# after each mark_step), two at a time on one empty cache per pair, as in
# test_compile_cache: the exit's races (a thread still running while the
# interpreter finalizes) show there; e.g. STRESS_ARGS="--short --processes 400".
stress: build
	$(VPY) tools/stress.py $(STRESS_ARGS)

# The native module built with AddressSanitizer in build-asan/ (build/ is not
# touched; CMake option LAZYMLIR_SANITIZER), then the compile and cache tests
# and two short BERT trainings run with it (tools/sanitizer/sitecustomize.py
# loads it in place of the installed one). Only our code is instrumented:
# Debian's LLVM/MLIR, torch and Python are not. libstdc++ is preloaded after
# libasan (Python does not link it: ASan's __cxa_throw interceptor would find
# no real one); leaks are not checked (Python leaks by design). Reports go to
# build-asan/reports/ and are printed; any report fails the target.
# ASAN_TESTS picks other tests.
ASAN_BUILD := build-asan
ASAN_TESTS ?= test/python/test_compile_cache.py test/python/test_lazy_cache.py test/python/test_native.py
ASAN_ENV = LD_PRELOAD="$(shell g++ -print-file-name=libasan.so) $(shell g++ -print-file-name=libstdc++.so.6)" \
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:log_path=$(CURDIR)/$(ASAN_BUILD)/reports/asan \
  ASAN_SYMBOLIZER_PATH=$(LLVM_BIN)/llvm-symbolizer \
  PYTHONPATH=$(CURDIR)/tools/sanitizer LAZYMLIR_NATIVE=$$(ls $(CURDIR)/$(ASAN_BUILD)/python/_native*.so)

asan-build: $(STAMPS)/apt $(STAMPS)/venv
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAZYMLIR_SANITIZER=address \
	  -DLAZYMLIR_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(CURDIR)/$(VPY) >/dev/null
	ninja -C $(ASAN_BUILD) _native

asan: asan-build
	@set -o pipefail; status=0; rm -rf $(ASAN_BUILD)/reports; mkdir -p $(ASAN_BUILD)/reports; \
	echo "== pytest with the AddressSanitizer build: $(ASAN_TESTS) =="; \
	$(ASAN_ENV) $(VPY) -m pytest -q -p no:cacheprovider $(ASAN_TESTS) 2>&1 | tail -n 15 || status=1; \
	echo "== two BERT trainings (tools/stress.py) with the AddressSanitizer build =="; \
	$(ASAN_ENV) $(VPY) tools/stress.py --processes 2 --jobs 1 --steps 6 --timeout 900 2>&1 | tail -n 15 || status=1; \
	for report in $(ASAN_BUILD)/reports/asan.*; do [ -e "$$report" ] || continue; \
	  echo "== $$report"; head -n 60 "$$report"; status=1; done; \
	echo "AddressSanitizer reports: $$(ls $(ASAN_BUILD)/reports | wc -l)"; \
	exit $$status

# The self-contained wheel (docs/NOTES.md, section 17): the developer
# build's objects relinked against Debian's static MLIR/LLVM archives and a
# static libstdc++, all symbols but the modules' entry points hidden, by zig's
# driver against glibc 2.28's symbol versions (tools/wheel/build_wheel.py):
# dist/lazymlir-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl, checked by
# auditwheel. `make wheel-check` installs it into a fresh venv with only its
# declared dependencies and, in a mount namespace that hides every LLVM/MLIR
# library of the system, runs ldd, lazymlir-opt --help, the MNIST CNN trained
# compiled and torch.compile(backend="lazymlir") (tools/wheel/check_wheel.py).
WHEEL_APT_PACKAGES := libzstd-dev zlib1g-dev

$(STAMPS)/wheel-tools: $(STAMPS)/venv tools/wheel/requirements.txt
	@if ! dpkg -s $(WHEEL_APT_PACKAGES) >/dev/null 2>&1; then \
	  echo "Installing Debian packages: $(WHEEL_APT_PACKAGES)"; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $(WHEEL_APT_PACKAGES); \
	fi
	$(call pip_install,-r tools/wheel/requirements.txt)
	@touch $@

wheel: build $(STAMPS)/wheel-tools
	$(VPY) tools/wheel/build_wheel.py

wheel-check: wheel
	$(VPY) tools/wheel/check_wheel.py

deps: $(STAMPS)/apt $(STAMPS)/venv

# Debian's MLIR 22 (C++ API; mlir-tblgen, which test/Docs runs; FileCheck,
# lit), installed only when missing.
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
