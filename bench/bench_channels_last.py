"""Channels-last benchmark: a ResNet basic block (64 channels, 56x56, batch 8,
eval mode) inference with input and parameters in NCHW and in channels_last:
eager PyTorch, torch.compile (inductor, warm) and lazymlir with and without the
NHWC pass (``config.patch(channels_last=...)``), all measured in this run.

    python bench/bench_channels_last.py [--repeats 20] [--no-compile]

lazymlir's step is what a user pays on a cache hit: trace, hash, execute,
wait.  Kernels = loop nests in the compiled graph (``lazymlir.kernel_count``).
Ratios are against eager in the same memory format.
"""

import argparse
import copy

import torch

import lazymlir
from lazymlir.testing import BasicBlock
from timing import median_seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to compile)")
    opts = parser.parse_args()

    torch.manual_seed(0)
    block = BasicBlock(64).eval()
    with torch.no_grad():
        for bn in (block.bn1, block.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 1.5)
    x = torch.randn(8, 64, 56, 56)
    print(f"ResNet basic block, 64 channels, 8x64x56x56 float32, eval; {torch.get_num_threads()} torch threads")
    header = f"{'format':14} {'variant':28} {'ms':>9} {'vs eager':>9} {'kernels':>8} {'out format':>14}"
    print(header)
    print("-" * len(header))
    for fmt_name, fmt in (("nchw", torch.contiguous_format), ("channels_last", torch.channels_last)):
        model = copy.deepcopy(block).to(memory_format=fmt)
        xf = x.to(memory_format=fmt).contiguous(memory_format=fmt)
        with torch.no_grad():
            expected = model(xf)
            rows = [("eager", lambda: model(xf), None, expected)]
            if not opts.no_compile:
                compiled = torch.compile(model)
                compiled(xf)  # warm: compile outside the timing
                rows.append(("torch.compile (inductor)", lambda: compiled(xf), None, compiled(xf)))
            lazy_model = copy.deepcopy(model).to("lazy")
            lx = xf.to("lazy")
            for pass_on in (True, False):
                with lazymlir.config.patch(channels_last=pass_on):

                    def step():
                        out = lazy_model(lx)
                        lazymlir.mark_step()
                        lazymlir.wait_device_ops()
                        return out

                    out = step()
                    torch.testing.assert_close(out.cpu(), expected, rtol=1e-3, atol=1e-3)
                    seconds = median_seconds(step, opts.repeats)
                    rows.append(
                        (f"lazymlir NHWC pass {'on' if pass_on else 'off'}", seconds, lazymlir.kernel_count(out), out)
                    )
            eager_seconds = None
            for variant, run, kernels, out in rows:
                seconds = run if isinstance(run, float) else median_seconds(run, opts.repeats)
                eager_seconds = eager_seconds or seconds
                out_fmt = "channels_last" if out.is_contiguous(memory_format=torch.channels_last) else "nchw"
                print(
                    f"{fmt_name:14} {variant:28} {seconds * 1e3:9.3f} {eager_seconds / seconds:8.2f}x "
                    f"{kernels if kernels is not None else '':>8} {out_fmt:>14}"
                )


if __name__ == "__main__":
    main()
