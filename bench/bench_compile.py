"""Compile time: how long the first training steps of real models take on the
lazy device, cold (empty disk cache) and in a second process (disk cache warm),
next to eager PyTorch's step time measured in the same run.

    python bench/bench_compile.py [--models lm2,lm12,bert,t5,mnist] [--steps 2]

Each measurement runs in a fresh process with its own cache directory
(LAZYMLIR_CACHE_DIR): "cold" starts from an empty one, "warm" is a second
process on the directory the cold one filled. Per model it prints the wall
time of the first ``--steps`` training steps (tracing, compiling, running, up
to wait_device_ops), the compile phases summed over graphs (from
lazymlir.metrics), the kernels compiled and reused, and the median step time
of eager PyTorch and of lazymlir: right after the first steps (kernels
compiled with little effort, being recompiled in the background) and once
the background compiler is done (steady state). BERT and T5 need ``transformers``
(random weights from a config, no download); without it they are skipped.

Targets (issue 16): lm2 <= 5 s cold and <= 1 s warm; lm12 < 3x lm2 cold;
bert <= 8 s cold; t5 <= 15 s cold; mnist's whole cold compile <= 3 s; steady
step times no worse than before.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------------------
# Models (built in the child process)


def _lm(layers):
    from lazymlir.testing import transformer_lm

    return (*transformer_lm(layers), "adamw")


def _hf(kind):
    from lazymlir.testing import hf_model

    return (*hf_model(kind), "adamw")


def _mnist():
    import torch
    import torch.nn.functional as F

    from lazymlir.testing import MnistNet

    def batch(device):
        return (torch.randn(64, 1, 28, 28).to(device), torch.randint(0, 10, (64,)).to(device))

    return MnistNet(), batch, lambda m, b: F.nll_loss(m(b[0]), b[1]), "adadelta"


MODELS = {
    "lm2": lambda: _lm(2),
    "lm12": lambda: _lm(12),
    "bert": lambda: _hf("bert"),
    "t5": lambda: _hf("t5"),
    "mnist": _mnist,
}


def child(name, steps, steady):
    """Runs in the measured process: prints one JSON line."""
    import torch

    import lazymlir
    from lazymlir import metrics

    torch.manual_seed(0)
    model, batch, loss_fn, optimizer = MODELS[name]()
    make_opt = {
        "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
        "adadelta": lambda p: torch.optim.Adadelta(p, lr=1.0),
    }[optimizer]
    result = {"model": name}
    for device in ("lazy", "cpu"):
        torch.manual_seed(0)
        m = (model.to("lazy") if device == "lazy" else MODELS[name]()[0]).train()
        opt = make_opt(m.parameters())

        def step():
            t0 = time.perf_counter()
            b = batch(device)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(m, b)
            loss.backward()
            opt.step()
            if device == "lazy":
                lazymlir.mark_step()
                lazymlir.wait_device_ops()
            return time.perf_counter() - t0

        first = [step() for _ in range(steps)]
        if device == "lazy":
            result["first_steps_s"] = sum(first)
            result["metrics"] = lazymlir.metrics.compile_report()
            result["disk"] = lazymlir.cache.stats()._asdict()
            result["fallbacks"] = metrics.counter_value("CompileFallback")
            if steady:
                # While the background compiler recompiles the hot kernels at
                # full effort (tiered compilation), then after it finished.
                result["early_step_s"] = statistics.median([step() for _ in range(steady)])
                t0 = time.perf_counter()
                lazymlir.cache.wait_background_compiles()
                result["background_wait_s"] = time.perf_counter() - t0
        result[f"{device}_step_s"] = statistics.median([step() for _ in range(steady)]) if steady else None
    print("RESULT " + json.dumps(result), flush=True)


def run_child(name, steps, steady, cache_dir):
    env = dict(os.environ, LAZYMLIR_CACHE_DIR=cache_dir)
    proc = subprocess.run(
        [sys.executable, __file__, "--child", name, "--steps", str(steps), "--steady", str(steady)],
        env=env,
        capture_output=True,
        text=True,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="lm2,lm12,bert,t5,mnist")
    parser.add_argument("--steps", type=int, default=2, help="first steps timed (compiles)")
    parser.add_argument("--steady", type=int, default=5, help="steady steps after them (median)")
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.steady)
        return
    names = args.models.split(",")
    try:
        import transformers  # noqa: F401
    except ImportError:
        skipped = [n for n in names if n in ("bert", "t5")]
        if skipped:
            print(f"transformers is not installed: skipping {', '.join(skipped)}")
        names = [n for n in names if n not in ("bert", "t5")]
    rows = []
    for name in names:
        with tempfile.TemporaryDirectory() as cache_dir:
            cold = run_child(name, args.steps, args.steady, cache_dir)
            warm = run_child(name, args.steps, 0, cache_dir)
        if cold is None or warm is None:
            print(f"{name}: failed")
            continue
        rows.append((name, cold, warm))
        m = cold["metrics"]
        print(
            f"{name}: first {args.steps} steps cold {cold['first_steps_s']:.2f} s, warm {warm['first_steps_s']:.2f} s; "
            f"steady step lazy {cold['lazy_step_s'] * 1e3:.1f} ms (before the background recompile "
            f"{cold['early_step_s'] * 1e3:.1f} ms, then waited {cold['background_wait_s']:.1f} s for it), "
            f"eager {cold['cpu_step_s'] * 1e3:.1f} ms (eager/lazy {cold['cpu_step_s'] / cold['lazy_step_s']:.2f}x)",
            flush=True,
        )
        print("   cold phases (s): " + ", ".join(f"{k} {v:.2f}" for k, v in m["phases"].items()))
        print(
            f"   cold: {m['graphs']} graphs, {m['kernels']} kernels, {m['kernels_compiled']} compiled, "
            f"{m['kernels_reused']} reused; warm: disk hits {warm['disk']['disk_hits']}, "
            f"misses {warm['disk']['disk_misses']}, compiled {warm['metrics']['kernels_compiled']} kernels"
        )
    by = {name: cold for name, cold, _ in rows}
    if "lm2" in by and "lm12" in by:
        print(f"lm12/lm2 cold first steps: {by['lm12']['first_steps_s'] / by['lm2']['first_steps_s']:.2f}x")


if __name__ == "__main__":
    main()
