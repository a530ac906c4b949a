"""Fusion benchmark: lazymlir with and without fusion against eager PyTorch and
torch.compile (inductor), all measured in this run.

    python bench/bench_fusion.py [--repeats 20] [--no-compile]

Cases (float32):
  chain    10 elementwise ops on two 4M-element tensors, sqrt and sigmoid
           among them: on 2 AVX-512 cores the fused kernel is compute-bound
           near 2.7 G elements/s (~32 GB/s effective)
  arith    10 arithmetic elementwise ops (no transcendentals) on the same
           tensors: memory-bound
  softmax  softmax over the last dim of 4096x1024
  mlp      relu(x @ W + b), x 256x1024, W 1024x1024

Variants are timed interleaved (one call of each per round, median over
rounds: bench/timing.py), so that drifting machine load hits them all alike.
Interleaving also means each variant starts with caches holding the previous
variant's data (inputs are read from memory, as in a real step) and next to
the other variants' idle OpenMP threads (libgomp, which torch and our
compiled parallel loops share, spins for a while after each parallel region).

For each: median step time (ms) over repeats (the "pipelined" row: time
per step of 8 steps run back to back with one wait at the end, as a
training loop runs them, tracing overlapping execution), speedup against
eager, and
effective bandwidth (GB/s) = unavoidable bytes (inputs read once, outputs
written once) / time, against the machine's copy bandwidth: eager
tensor.copy_ of 256 MB on all threads, counted as 2 x 256 MB like STREAM's
copy, timed as one more variant in the same rounds (this machine's bandwidth
drifts between runs by up to 1.5x; a reference measured apart from the
variants would make the ratios drift with it). lazymlir's step is the whole
thing a user pays on a cache hit: trace, hash, execute, wait; the "kernel
only" row is the same compiled graph run on its own into an output allocated
once (what the compiler's code costs, without the Python tracer). lazymlir runs
large kernels on all hardware threads (the default, as eager and inductor do);
the "1 thread" row runs everything in one (LAZYMLIR_THREADS=1). Kernels = loop
nests in the compiled graph (lazymlir.execution.native's count).
"""

import argparse

import torch
import torch.nn.functional as F

import lazymlir
from timing import interleaved_median_seconds
from lazymlir.execution import native  # noqa: E402


def chain(x, y):
    # 10 ops: mul, add, relu, mul, sub, abs, add, sqrt, mul, sigmoid
    return torch.sigmoid((((x * 2.0 + 1.0).relu() * y - 0.5).abs() + 1.0).sqrt() * 3.0)


def arith(x, y):
    # 10 ops: mul, add, relu, mul, sub, abs, add, mul, sub, clamp
    return (((((x * 2.0 + 1.0).relu() * y - 0.5).abs() + 1.0) * 3.0) - y).clamp(-4.0, 4.0)


def softmax(x):
    return torch.softmax(x, dim=-1)


def mlp(x, w, b):
    return F.relu(x @ w + b)


def cases():
    n = 4 * 1024 * 1024
    return {
        "chain": (chain, (torch.randn(n), torch.randn(n)), 3 * n * 4),
        "arith": (arith, (torch.randn(n), torch.randn(n)), 3 * n * 4),
        "softmax": (softmax, (torch.randn(4096, 1024),), 2 * 4096 * 1024 * 4),
        "mlp": (
            mlp,
            (torch.randn(256, 1024), torch.randn(1024, 1024) / 32, torch.randn(1024)),
            (256 * 1024 + 1024 * 1024 + 1024 + 256 * 1024) * 4,
        ),
    }


COPY = "memory copy (reference)"
KERNEL_ONLY = "lazymlir kernel only"


def copy_step():
    """The bandwidth reference: (step, bytes counted)."""
    src = torch.randn(64 * 1024 * 1024)
    dst = torch.empty_like(src)
    return (lambda: dst.copy_(src)), 2 * src.numel() * 4


def compile_case(fn, args, fusion):
    """The case's graph compiled on its own (the lazy device's compiler, no
    tracing): its kernel count, and the "kernel only" row."""
    from torch_mlir import fx

    class Wrap(torch.nn.Module):
        def forward(self, *a):
            return fn(*a)

    text = str(fx.export_and_import(Wrap(), *args, output_type="linalg-on-tensors", func_name="main"))
    return native.compile_linalg(text, fusion=fusion)


def kernel_only_step(exe, args, expected):
    """The compiled graph ``exe`` run on its own, on all threads, into an
    output allocated once: no trace, no cache lookup, no allocation."""
    inputs, outs = list(args), [torch.empty_like(expected)]
    exe.run(inputs, outs)
    torch.testing.assert_close(outs[0], expected, rtol=1e-4, atol=1e-4)
    return lambda: native.run_allocated(exe, inputs, outs)


def lazy_step(fn, args, pipelined=1):
    """One call: `pipelined` steps (trace, mark_step) and one wait at the end,
    as a training loop runs (the worker executes step k while the caller
    traces step k+1); 1: wait after the step (its latency)."""
    lazy_args = [a.to("lazy") for a in args]

    def step():
        for _ in range(pipelined):
            out = fn(*lazy_args)
            lazymlir.mark_step()
        lazymlir.wait_device_ops()
        return out

    return step


PIPELINED = 8


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to compile)")
    opts = parser.parse_args()

    torch.manual_seed(0)
    copy, copy_bytes = copy_step()
    print(
        f"machine: {torch.get_num_threads()} torch threads; 'of bw' is against the {COPY} row "
        f"(eager copy_ of 256 MB, timed in the same rounds)"
    )
    header = f"{'case':8} {'variant':26} {'ms':>9} {'vs eager':>9} {'GB/s':>7} {'of bw':>6} {'kernels':>8}"
    print(header)
    print("-" * len(header))
    for name, (fn, args, nbytes) in cases().items():
        expected = fn(*args)
        steps = {"eager": lambda: fn(*args)}
        if not opts.no_compile:
            compiled = torch.compile(fn)
            steps["torch.compile"] = lambda: compiled(*args)
        kernels = {}
        calls = {}  # variant -> steps per call
        compiled = {fusion: compile_case(fn, args, fusion) for fusion in (True, False)}
        for fusion, threads, pipelined in ((True, 0, 1), (False, 0, 1), (True, 1, 1), (True, 0, PIPELINED)):
            variant = (
                f"lazymlir fusion={'on' if fusion else 'off'}"
                + (" 1 thread" if threads == 1 else "")
                + (" pipelined" if pipelined > 1 else "")
            )
            with lazymlir.config.patch(fusion=fusion, threads=threads):
                step = lazy_step(fn, args, pipelined)
                torch.testing.assert_close(step().cpu(), expected, rtol=1e-4, atol=1e-4)
            # The step's graph is cached under these options: keep them on
            # while it is timed.
            steps[variant] = _patched(step, fusion=fusion, threads=threads)
            calls[variant] = pipelined
            kernels[variant] = compiled[fusion].kernel_count
        steps[KERNEL_ONLY] = kernel_only_step(compiled[True], args, expected)
        kernels[KERNEL_ONLY] = kernels["lazymlir fusion=on"]
        steps[COPY] = copy
        seconds = interleaved_median_seconds(steps, opts.repeats)
        seconds = {v: s / calls.get(v, 1) for v, s in seconds.items()}
        bandwidth = copy_bytes / seconds.pop(COPY) / 1e9
        print(f"{name:8} {COPY:26} {'':>9} {'':>9} {bandwidth:7.1f}")
        eager_seconds = seconds["eager"]
        for variant, s in seconds.items():
            gbs = nbytes / s / 1e9
            print(
                f"{name:8} {variant:26} {s * 1e3:9.3f} {eager_seconds / s:8.2f}x "
                f"{gbs:7.1f} {gbs / bandwidth:6.0%} {kernels.get(variant, ''):>8}"
            )


def _patched(step, **options):
    def run():
        with lazymlir.config.patch(**options):
            return step()

    return run


if __name__ == "__main__":
    main()
