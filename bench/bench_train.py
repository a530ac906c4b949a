"""Training step time: lazymlir against eager PyTorch, for an MLP and the
tutorial's MNIST CNN (Adadelta, batch 64), once graphs are cached.

    python bench/bench_train.py [--steps 20] [--models mlp,cnn]

Per model, medians over steps:

* eager: forward + backward + optimizer step;
* lazymlir, waiting after each step (mark_step + wait_device_ops): the latency
  of one step, split into tracing (until mark_step returns) and the compiled
  graph's execution (ExecuteTime);
* lazymlir, pipelined (the tutorial's loop, no wait): mean time per step over
  the run, where tracing step k+1 overlaps executing step k on the worker.
"""

import argparse
import statistics
import time

import torch
import torch.nn as nn


import lazymlir  # noqa: E402
from lazymlir import metrics  # noqa: E402
from lazymlir.testing import MnistNet as Net, train_step  # noqa: E402


def mlp():
    return nn.Sequential(
        nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.2), nn.Linear(256, 10), nn.LogSoftmax(1)
    )


def bench(make_model, steps, batch=64):
    torch.manual_seed(0)
    data = [(torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))) for _ in range(4)]
    results = {}
    for device in ("cpu", "lazy"):
        model = make_model().to(device).train()
        opt = torch.optim.Adadelta(model.parameters(), lr=1.0)

        def step(i):
            x, y = data[i % len(data)]
            return train_step(model, opt, x, y, device)

        for i in range(6):  # warm up: compile the first and the steady step, and
            step(i)  # let the background compiler optimize the steady one
        lazymlir.wait_device_ops()
        lazymlir.cache.wait_background_compiles()
        metrics.reset()
        latency, traced = [], []
        for i in range(steps):
            t0 = time.perf_counter()
            step(i)
            t1 = time.perf_counter()
            lazymlir.wait_device_ops()
            latency.append(time.perf_counter() - t0)
            traced.append(t1 - t0)
        results[device] = statistics.median(latency)
        if device == "lazy":
            results["trace"] = statistics.median(traced)
            results["execute"] = statistics.median(metrics.timing_samples("ExecuteTime"))
            compiled = metrics.counter_value("CachedCompile")
            t0 = time.perf_counter()
            for i in range(steps):
                loss = step(i)
            loss.item()
            results["pipelined"] = (time.perf_counter() - t0) / steps
            results["all_cached"] = compiled == steps and not metrics.executed_fallback_ops()
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--models", default="mlp,cnn")
    args = parser.parse_args()
    models = {"mlp": ("MLP 784-256-10", mlp), "cnn": ("MNIST CNN (tutorial)", Net)}
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, Adadelta, batch 64, "
        f"medians of {args.steps} steps (ms)"
    )
    print(
        f"{'model':22s} {'eager':>8s} {'lazymlir':>9s} {'trace':>8s} {'graph':>8s} {'pipelined':>10s} {'lm/eager':>9s}"
    )
    for name in args.models.split(","):
        label, make = models[name]
        r = bench(make, args.steps)
        print(
            f"{label:22s} {r['cpu'] * 1e3:8.2f} {r['lazy'] * 1e3:9.2f} {r['trace'] * 1e3:8.2f} "
            f"{r['execute'] * 1e3:8.2f} {r['pipelined'] * 1e3:10.2f} {r['pipelined'] / r['cpu']:8.2f}x"
            + ("" if r["all_cached"] else "  (not all steps compiled and cached!)")
        )


if __name__ == "__main__":
    main()
