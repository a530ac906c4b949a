"""Fusion benchmark: lazymlir with and without fusion against eager PyTorch and
torch.compile (inductor), all measured in this run.

    python bench/bench_fusion.py [--repeats 20] [--no-compile]

Cases (float32):
  chain    10 elementwise ops on two 4M-element tensors
  softmax  softmax over the last dim of 4096x1024
  mlp      relu(x @ W + b), x 256x1024, W 1024x1024

Variants are timed interleaved (one call of each per round, median over
rounds: bench/timing.py), so that drifting machine load hits them all alike.
Interleaving also means each variant starts with caches holding the previous
variant's data (inputs are read from memory, as in a real step) and next to
the other variants' idle OpenMP threads (torch's libgomp spins for a while
after each parallel region; our libomp's threads spin for KMP_BLOCKTIME).

For each: median step time (ms) over repeats, speedup against eager, and
effective bandwidth (GB/s) = unavoidable bytes (inputs read once, outputs
written once) / time, against the machine's copy bandwidth measured here
(eager tensor.copy_ on 256 MB, all threads). lazymlir's step is the whole
thing a user pays on a cache hit: trace, hash, execute, wait. lazymlir runs
large kernels on all hardware threads (the default, as eager and inductor do);
the "1 thread" row runs everything in one (LAZYMLIR_THREADS=1). Kernels = loop
nests in the compiled graph (lazymlir.compiler's count).
"""

import argparse

import torch
import torch.nn.functional as F

import lazymlir
from timing import interleaved_median_seconds, median_seconds
from lazymlir import compiler


def chain(x, y):
    # 10 ops: mul, add, relu, mul, sub, abs, add, sqrt, mul, sigmoid
    return torch.sigmoid((((x * 2.0 + 1.0).relu() * y - 0.5).abs() + 1.0).sqrt() * 3.0)


def softmax(x):
    return torch.softmax(x, dim=-1)


def mlp(x, w, b):
    return F.relu(x @ w + b)


def cases():
    n = 4 * 1024 * 1024
    return {
        "chain": (chain, (torch.randn(n), torch.randn(n)), 3 * n * 4),
        "softmax": (softmax, (torch.randn(4096, 1024),), 2 * 4096 * 1024 * 4),
        "mlp": (mlp, (torch.randn(256, 1024), torch.randn(1024, 1024) / 32, torch.randn(1024)),
                (256 * 1024 + 1024 * 1024 + 1024 + 256 * 1024) * 4),
    }



def copy_bandwidth(repeats):
    src = torch.randn(64 * 1024 * 1024)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), repeats)
    return 2 * src.numel() * 4 / seconds / 1e9


def kernel_count(fn, args, fusion):
    from torch_mlir import fx

    class Wrap(torch.nn.Module):
        def forward(self, *a):
            return fn(*a)

    text = str(fx.export_and_import(Wrap(), *args, output_type="linalg-on-tensors", func_name="main"))
    return compiler.compile_linalg(text, fusion=fusion).num_kernels


def lazy_step(fn, args):
    lazy_args = [a.to("lazy") for a in args]

    def step():
        out = fn(*lazy_args)
        lazymlir.mark_step()
        lazymlir.wait_device_ops()
        return out

    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to compile)")
    opts = parser.parse_args()

    torch.manual_seed(0)
    bandwidth = copy_bandwidth(opts.repeats)
    print(f"machine: {torch.get_num_threads()} torch threads, copy bandwidth {bandwidth:.1f} GB/s (eager copy_)")
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
        for fusion, threads in ((True, 0), (False, 0), (True, 1)):
            variant = f"lazymlir fusion={'on' if fusion else 'off'}" + (" 1 thread" if threads == 1 else "")
            with lazymlir.config.patch(fusion=fusion, threads=threads):
                step = lazy_step(fn, args)
                torch.testing.assert_close(step().cpu(), expected, rtol=1e-4, atol=1e-4)
            # The step's graph is cached under these options: keep them on
            # while it is timed.
            steps[variant] = _patched(step, fusion=fusion, threads=threads)
            kernels[variant] = kernel_count(fn, args, fusion)
        seconds = interleaved_median_seconds(steps, opts.repeats)
        eager_seconds = seconds["eager"]
        for variant, s in seconds.items():
            gbs = nbytes / s / 1e9
            print(f"{name:8} {variant:26} {s * 1e3:9.3f} {eager_seconds / s:8.2f}x "
                  f"{gbs:7.1f} {gbs / bandwidth:6.0%} {kernels.get(variant, ''):>8}")


def _patched(step, **options):
    def run():
        with lazymlir.config.patch(**options):
            return step()

    return run

if __name__ == "__main__":
    main()
