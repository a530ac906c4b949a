"""Tracing overhead and cache-hit step latency: lazymlir vs eager vs torch._lazy.

    python bench/bench_trace.py [--ops 1000] [--repeats 15]

Two numbers, side by side, medians over repeats:

* per-op trace overhead (us/op): recording a chain of ``x = x * 1.0001 + 0.5`` on
  a 16-element tensor (2 ops per iteration), compilation excluded (warmed up);
  for eager it is the time to run the ops.
* cache-hit step latency (ms): one MLP inference step (move the batch to the
  device, forward, mark_step, wait) once the graph is cached: trace + hash +
  execute.

torch._lazy's TorchScript backend runs in a subprocess: it and lazymlir both
claim the "lazy" device and cannot share a process.
"""

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def chain(x, n):
    for _ in range(n):
        x = x * 1.0001 + 0.5
    return x


def measure(backend: str, n_ops: int, repeats: int) -> dict:
    """Run both measurements on one backend: 'eager', 'lazymlir' or 'torch_lazy'."""
    torch.manual_seed(0)
    if backend == "eager":
        device, mark_step, wait = "cpu", (lambda: None), (lambda: None)
    elif backend == "lazymlir":
        import lazymlir

        device, mark_step, wait = "lazy", lazymlir.mark_step, lazymlir.wait_device_ops
    else:
        ltc = importlib.import_module("torch._lazy")
        importlib.import_module("torch._lazy.ts_backend").init()
        device, mark_step, wait = "lazy", ltc.mark_step, ltc.wait_device_ops

    # Per-op trace overhead.
    x = torch.randn(16).to(device)
    mark_step()
    chain(x, n_ops)
    mark_step()  # compile once, outside the timings
    wait()
    per_op = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        y = chain(x, n_ops)
        per_op.append((time.perf_counter() - t0) / (2 * n_ops) * 1e6)
        mark_step()
        wait()
    del y

    # Cache-hit step latency.
    with torch.no_grad():
        model = MLP().eval().to(device)
        batch = torch.randn(64, 784)
        for _ in range(3):  # compile, then hits
            out = model(batch.to(device))
            mark_step()
            wait()
        step = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = model(batch.to(device))
            mark_step()
            wait()
            step.append((time.perf_counter() - t0) * 1e3)
        check = out.cpu()

    result = {
        "per_op_us": statistics.median(per_op),
        "step_ms": statistics.median(step),
        "checksum": float(check.sum()),
    }
    if backend == "lazymlir":
        from lazymlir import metrics

        result["mode"] = (
            "compiled" if metrics.counter_value("CachedCompile") else "eager fallback (no native compiler?)"
        )
        execute = metrics.timing_samples("ExecuteTime")[-repeats:]
        result["execute_ms"] = statistics.median(execute) * 1e3
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=1000, help="iterations of the chain (2 ops each)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--backend", choices=["eager", "lazymlir", "torch_lazy"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(1)  # comparable, and the build machine is shared

    if args.backend:  # child mode: one backend, JSON on the last line
        print(json.dumps(measure(args.backend, args.ops, args.repeats)))
        return

    results = {}
    for backend in ("eager", "lazymlir", "torch_lazy"):
        proc = subprocess.run(
            [sys.executable, __file__, "--backend", backend, "--ops", str(args.ops), "--repeats", str(args.repeats)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            print(f"{backend} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
            results[backend] = None
            continue
        results[backend] = json.loads(proc.stdout.strip().splitlines()[-1])

    def cell(backend, key):
        r = results.get(backend)
        return f"{r[key]:12.2f}" if r else f"{'n/a':>12}"

    def ratio(a, b, key):
        ra, rb = results.get(a), results.get(b)
        return f"{ra[key] / rb[key]:10.2f}x" if ra and rb else f"{'n/a':>11}"

    print(f"torch {torch.__version__}, 1 thread, medians of {args.repeats}")
    header = f"{'':28}{'eager':>12}{'lazymlir':>12}{'torch._lazy':>12}{'lm/eager':>11}{'lm/ltc':>11}"
    print(header)
    for label, key in (("trace overhead (us/op)", "per_op_us"), ("MLP cache-hit step (ms)", "step_ms")):
        print(
            f"{label:28}{cell('eager', key)}{cell('lazymlir', key)}{cell('torch_lazy', key)}"
            f"{ratio('lazymlir', 'eager', key)}{ratio('lazymlir', 'torch_lazy', key)}"
        )
    lm = results.get("lazymlir")
    if lm:
        print(
            f"lazymlir execution: {lm['mode']}; of its step, the executable ran {lm['execute_ms']:.2f} ms "
            f"and trace + hash + allocation took {lm['step_ms'] - lm['execute_ms']:.2f} ms"
        )
    sums = {b: round(r["checksum"], 3) for b, r in results.items() if r}
    print(f"MLP output checksums: {sums}")


if __name__ == "__main__":
    main()
