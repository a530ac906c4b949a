"""What the runtime checks (lazymlir-guard-runtime-checks) cost: kernels of
indexing and integer division compiled with and without them, from the
linalg text torch-mlir produces for the lazy trace, timed interleaved.

    python bench/bench_runtime_checks.py [--repeats 200] [--inner 20]

Cases:
  embedding  F.embedding(tokens 4x64, table 30522x128 f32) (+ 1)
  gather     torch.gather(x 1024x1024 f32, 1, idx 1024x256) (+ 1)
  index      x[idx] (rows), x 30522x128, idx 256
  floordiv   a // b, int64, 1M elements
  remainder  a % b, int64, 1M elements

Each variant is the same compiled graph (one executable with checks, one
without) run on its own into outputs allocated once (run_allocated): the
kernel, not the Python around it. Median over rounds of `inner` runs each,
variants interleaved (bench/timing.py).
"""

import argparse
import glob
import os
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from timing import interleaved_median_seconds  # noqa: E402

DUMP = tempfile.mkdtemp(prefix="lazymlir-bench-checks-")
os.environ["LAZYMLIR_DUMP_DIR"] = DUMP

import lazymlir  # noqa: E402, F401  (registers the lazy device)
from lazymlir import dtypes  # noqa: E402
from lazymlir.execution import native  # noqa: E402


def linalg_of(fn, args):
    """The linalg text of the graph the lazy device compiles for fn(*args)."""
    before = set(glob.glob(os.path.join(DUMP, "*.linalg.mlir")))
    fn(*[a.to("lazy") for a in args]).cpu()
    new = sorted(set(glob.glob(os.path.join(DUMP, "*.linalg.mlir"))) - before)
    assert len(new) == 1, new
    with open(new[0]) as f:
        return f.read()


def cases():
    g = torch.Generator().manual_seed(0)
    table = torch.randn(30522, 128, generator=g)
    tokens = torch.randint(0, 30522, (4, 64), generator=g)
    x = torch.randn(1024, 1024, generator=g)
    idx = torch.randint(0, 1024, (1024, 256), generator=g)
    rows = torch.randint(0, 30522, (256,), generator=g)
    a = torch.randint(-1000, 1000, (1 << 20,), generator=g)
    b = torch.randint(1, 50, (1 << 20,), generator=g)
    return {
        "embedding": (lambda t, w: F.embedding(t, w) + 1, (tokens, table)),
        "gather": (lambda i, x: torch.gather(x, 1, i) + 1, (idx, x)),
        "index": (lambda i, x: x[i] + 1, (rows, table)),
        "floordiv": (lambda a, b: a // b, (a, b)),
        "remainder": (lambda a, b: a % b, (a, b)),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--inner", type=int, default=20)
    parser.add_argument("--threads", type=int, default=0, help="as LAZYMLIR_THREADS (0: all)")
    opts = parser.parse_args()
    print(
        f"threads: {opts.threads or torch.get_num_threads()}; median of {opts.repeats} rounds x {opts.inner} runs, interleaved"
    )
    print(f"{'case':10} {'without':>12} {'with checks':>12} {'ratio':>7}")
    for name, (fn, args) in cases().items():
        text = linalg_of(fn, args)
        expected = fn(*args)
        variants = {}
        for checks in (False, True):
            exe = native.compile_linalg(text, runtime_checks=checks, threads=opts.threads)
            assert exe.has_runtime_checks == checks
            outs = [torch.empty(shape, dtype=expected.dtype) for _, shape in exe.outputs]
            # the graph's inputs, in its order (matched by shape and dtype)
            # (first unused argument of that signature: a // b reads a first)
            unused = list(args)
            inputs = []
            for t, shape in exe.inputs:
                a = next(a for a in unused if (dtypes.element_type(a.dtype), tuple(a.shape)) == (t, tuple(shape)))
                unused = [u for u in unused if u is not a]
                inputs.append(a.contiguous())
            exe.run(inputs, outs)
            torch.testing.assert_close(outs[0], expected)

            def run(exe=exe, inputs=inputs, outs=outs):
                for _ in range(opts.inner):
                    native.run_allocated(exe, inputs, outs)

            variants[checks] = run
        t = interleaved_median_seconds(variants, opts.repeats)
        off, on = t[False] / opts.inner * 1e6, t[True] / opts.inner * 1e6
        print(f"{name:10} {off:10.1f}us {on:10.1f}us {on / off:7.3f}")


if __name__ == "__main__":
    main()
