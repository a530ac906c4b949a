"""Dynamic shapes: compiles over a sweep of sizes, and a dynamic graph's step
time against the static graph's at the same size (issue 20's targets).

    python bench/bench_dynamic.py [--smoke] [--repeats 15] [--json PATH]

1. The MLP training step (AdamW) at every batch size from 1 to 64, and the
   2-layer transformer LM training step at sequence lengths 8, 16, ..., 128:
   how many graphs each sweep compiles, in all and after the first step
   (target: at most 2; the first AdamW step, which creates the optimizer
   state, is a graph of its own whatever the sizes), the compile seconds,
   and the loss against eager at every size (a wrong value fails the run).
   The MLP's forward pass (no_grad) over batch sizes 1 to 64 too.
2. Steady-state step time (median, after the background recompile of
   tiered compilation) at a few sizes, on the dynamic graph and
   on a static graph compiled for that size alone (LAZYMLIR_DYNAMIC=0, cache
   cleared): the ratio dynamic / static (target <= 1.2).
"""

import argparse
import copy
import json
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timing  # noqa: E402

import lazymlir  # noqa: E402
from lazymlir import config, metrics, testing  # noqa: E402


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10), nn.LogSoftmax(1))


def mlp_batch(b):
    return torch.randn(b, 784), torch.randint(0, 10, (b,))


def mlp_loss(model, batch, device):
    x, y = batch
    return nn.functional.nll_loss(model(x.to(device)), y.to(device))


def lm(seq_max):
    torch.manual_seed(0)
    model, _, _ = testing.transformer_lm(2, seq=seq_max)
    return model


def lm_batch(t):
    ids = torch.randint(0, 1000, (4, t))
    return ids, ids


def lm_loss(model, batch, device):
    ids, labels = batch
    return model(ids.to(device), labels.to(device))


class Trainer:
    """A model and its AdamW optimizer on one device."""

    def __init__(self, model, loss, device):
        self.model = copy.deepcopy(model).to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), 1e-3)
        self.loss, self.device = loss, device

    def step(self, batch):
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss(self.model, batch, self.device)
        loss.backward()
        self.opt.step()
        if self.device == "lazy":
            lazymlir.mark_step()
        return loss


def counts():
    return {k: metrics.counter_value(k) for k in ("UncachedCompile", "DynamicCompile", "DynamicGraphHit",
                                                  "DynamicCompileFallback", "CompileFallback")}


def sweep(name, model, loss, make_batch, sizes):
    """Train on lazy and eager side by side over ``sizes``; compiles and the
    worst loss difference."""
    lazymlir.cache.clear()
    metrics.reset()
    lazy, eager = Trainer(model, loss, "lazy"), Trainer(model, loss, "cpu")
    worst = 0.0
    t0 = time.perf_counter()
    first = None
    for s in sizes:
        batch = make_batch(s)
        worst = max(worst, abs(lazy.step(batch).item() - eager.step(batch).item()))
        first = counts()["UncachedCompile"] if first is None else first
    return _sweep_result(name, sizes, time.perf_counter() - t0, worst, first)


def _sweep_result(name, sizes, seconds, worst, first_step_graphs):
    c = counts()
    return {"workload": name, "sizes": f"{sizes[0]}..{sizes[-1]} ({len(sizes)})", "graphs_compiled": c["UncachedCompile"],
            "graphs_after_first_step": c["UncachedCompile"] - first_step_graphs,
            "dynamic_compiles": c["DynamicCompile"], "dynamic_hits": c["DynamicGraphHit"],
            "dynamic_fallbacks": c["DynamicCompileFallback"], "eager_fallbacks": c["CompileFallback"],
            "compile_s": lazymlir.cache.stats().compile_seconds, "sweep_s": seconds, "worst_loss_diff": worst}


def inference_sweep(name, model, make_batch, sizes):
    """The forward pass alone (no_grad) over ``sizes``: compiles and the
    worst output difference from eager."""
    lazymlir.cache.clear()
    metrics.reset()
    lazy, eager = copy.deepcopy(model).to("lazy"), model
    worst = 0.0
    t0 = time.perf_counter()
    with torch.no_grad():
        for s in sizes:
            x = make_batch(s)[0]
            worst = max(worst, (lazy(x.to("lazy")).cpu() - eager(x)).abs().max().item())
    return _sweep_result(name, sizes, time.perf_counter() - t0, worst, 0)


def step_time(model, loss, make_batch, size, warm_sizes, repeats, dynamic):
    """Median step time at ``size``: on the dynamic graph (compiled from
    ``warm_sizes`` first) or on a static graph compiled for ``size``."""
    lazymlir.wait_device_ops()
    lazymlir.cache.clear()
    metrics.reset()
    t = Trainer(model, loss, "lazy")
    batch = make_batch(size)
    def dynamic_runs():
        return metrics.counter_value("DynamicGraphHit") + metrics.counter_value("DynamicCompile")

    with config.patch(dynamic=dynamic):
        if dynamic:
            for s in warm_sizes:
                t.step(make_batch(s)).item()
        before = dynamic_runs()
        t.step(batch).item()  # the first step at this size: a dynamic graph's or not
        ran_dynamic = dynamic_runs() > before
        # Steady state: past tiered compilation's recompile at full effort.
        for _ in range(config.tier_up_runs):
            t.step(batch)
        lazymlir.wait_device_ops()
        lazymlir.cache.wait_background_compiles()

        def run():
            t.step(batch)
            lazymlir.wait_device_ops()

        seconds = timing.median_seconds(run, repeats)
    if dynamic and not ran_dynamic:
        return None  # the size did not run on a dynamic graph
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sweeps, one timed size (for make test)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)

    if args.smoke:
        mlp_sizes, lm_sizes, timed = [1, 2, 3, 5], [8, 16, 24], [("mlp", 5, [2, 3, 4])]
    else:
        mlp_sizes, lm_sizes = list(range(1, 65)), list(range(8, 129, 8))
        timed = [("mlp", 64, [2, 3, 4]), ("mlp", 37, [2, 3, 4]), ("lm", 64, [8, 16, 24]), ("lm", 100, [8, 16, 24])]
    with config.patch(cache_dir=None, dynamic=True):
        m, l = mlp(), lm(max(lm_sizes))
        sweeps = [sweep("MLP training step, batch sizes", m, mlp_loss, mlp_batch, mlp_sizes),
                  sweep("2-layer LM training step, sequence lengths", l, lm_loss, lm_batch, lm_sizes),
                  inference_sweep("MLP forward (no_grad), batch sizes", m, mlp_batch, mlp_sizes)]
        times = []
        for which, size, warm in timed:
            model, loss, make = (m, mlp_loss, mlp_batch) if which == "mlp" else (l, lm_loss, lm_batch)
            repeats = max(3, args.repeats // (1 if which == "mlp" else 3))
            dyn = step_time(model, loss, make, size, warm, repeats, True)
            static = step_time(model, loss, make, size, warm, repeats, False)
            times.append({"workload": which, "size": size, "dynamic_ms": dyn and dyn * 1e3,
                          "static_ms": static * 1e3, "ratio": dyn and dyn / static})

    print(f"torch {torch.__version__}, 1 intra-op thread for eager; lazymlir threads={config.threads or os.cpu_count()}")
    print(f"{'sweep':54} {'graphs':>6} {'after 1st':>9} {'dynamic':>7} {'hits':>5} {'fallback':>8} {'compile s':>9} "
          f"{'max |diff|':>11}")
    for s in sweeps:
        print(f"{s['workload'] + ' ' + s['sizes']:54} {s['graphs_compiled']:>6} {s['graphs_after_first_step']:>9} "
              f"{s['dynamic_compiles']:>7} "
              f"{s['dynamic_hits']:>5} {s['dynamic_fallbacks']:>8} {s['compile_s']:>9.1f} {s['worst_loss_diff']:>11.2e}")
    print(f"{'step time at one size':54} {'static ms':>9} {'dynamic ms':>10} {'dyn/static':>10}")
    for t in times:
        dyn = f"{t['dynamic_ms']:.2f}" if t["dynamic_ms"] is not None else "static"
        ratio = f"{t['ratio']:.2f}x" if t["ratio"] is not None else "-"
        print(f"{t['workload'] + ' at ' + str(t['size']):54} {t['static_ms']:>9.2f} {dyn:>10} {ratio:>10}")
    bad = [s for s in sweeps if s["worst_loss_diff"] > 1e-3]
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"sweeps": sweeps, "step_times": times}, f, indent=1)
    if bad:
        print("WRONG: losses differ from eager in", [s["workload"] for s in bad])
        sys.exit(1)


if __name__ == "__main__":
    main()
