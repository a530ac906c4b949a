"""Dynamic shapes: compiles over a sweep of sizes, and a dynamic graph's step
time against the static graph's at the same size (issues 20 and 29).

    python bench/bench_dynamic.py [--smoke] [--repeats 15] [--rounds 3] [--json PATH]

1. Training steps (AdamW) over sweeps of sizes: an MLP at every batch size
   from 1 to 64, the 2-layer transformer LM at sequence lengths 8, 16, ...,
   128, the MNIST CNN (dropout off) and a ResNet BasicBlock with a linear
   head (NCHW and channels_last) over batch sizes with ragged ones: how many
   graphs each sweep compiles, in all and after the first step (target: at
   most 2; the first AdamW step, which creates the optimizer state, is a
   graph of its own whatever the sizes), the compile seconds, and the loss
   against eager at every size (a wrong value fails the run). The MLP's
   forward pass (no_grad) too.
2. Steady-state step time (median, after the background recompile of
   tiered compilation) at a few sizes, on the dynamic graph and on a static
   graph compiled for that size alone (LAZYMLIR_DYNAMIC=0, cache cleared),
   in rounds of (dynamic, static): the median of the per-round ratios
   dynamic / static (target <= 1.2 for every family). The static tier-up
   (a size that keeps coming back gets its static graph) is off here: this
   is the dynamic graph's own speed.
3. The MNIST CNN's step time at batch 64 in a fresh process on an empty
   disk cache, against one started after a ragged-batch run (the static
   graph and a dynamic one on disk, as `make demo` leaves them): the median
   of per-round ratios (target <= 1.2; it was 20-25x when the later process
   ran the dynamic graph).
"""

import argparse
import copy
import json
import os
import statistics
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


def nll_loss(model, batch, device):
    x, y = batch
    return nn.functional.nll_loss(model(x.to(device)), y.to(device))


def mnist():
    torch.manual_seed(0)
    return testing.MnistNet().eval()  # dropout off: losses comparable with eager's


def mnist_batch(b):
    return torch.randn(b, 1, 28, 28), torch.randint(0, 10, (b,))


def resnet():
    """A ResNet BasicBlock (16 channels, batch norm in training mode) and a
    linear head, on 16x16 feature maps."""
    torch.manual_seed(0)
    return nn.Sequential(testing.BasicBlock(16), nn.Flatten(), nn.Linear(16 * 16 * 16, 10), nn.LogSoftmax(1))


def resnet_batch(b, channels_last=False):
    x = torch.randn(b, 16, 16, 16)
    return (x.to(memory_format=torch.channels_last) if channels_last else x), torch.randint(0, 10, (b,))


def resnet_cl_batch(b):
    return resnet_batch(b, channels_last=True)


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
    return {
        k: metrics.counter_value(k)
        for k in ("UncachedCompile", "DynamicCompile", "DynamicGraphHit", "DynamicCompileFallback", "CompileFallback")
    }


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
    return {
        "workload": name,
        "sizes": f"{sizes[0]}..{sizes[-1]} ({len(sizes)})",
        "graphs_compiled": c["UncachedCompile"],
        "graphs_after_first_step": c["UncachedCompile"] - first_step_graphs,
        "dynamic_compiles": c["DynamicCompile"],
        "dynamic_hits": c["DynamicGraphHit"],
        "dynamic_fallbacks": c["DynamicCompileFallback"],
        "eager_fallbacks": c["CompileFallback"],
        "compile_s": lazymlir.cache.stats().compile_seconds,
        "sweep_s": seconds,
        "worst_loss_diff": worst,
    }


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

    # The dynamic graph's own speed: no static tier-up for the timed size.
    with config.patch(dynamic=dynamic, static_tier_up_runs=0):
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


def later_process_child(batch, steps, ragged) -> None:
    """In a fresh process on LAZYMLIR_CACHE_DIR: with ``ragged``, the MNIST
    CNN's training at ``batch``, twice, then a ragged last batch (what `make
    demo` leaves on disk: the static graph and a dynamic one); else
    ``steps`` timed steps at ``batch`` after warm-up (median seconds, and
    whether any ran a dynamic graph)."""
    lazymlir.cache.clear()
    t = Trainer(mnist(), nll_loss, "lazy")
    if ragged:
        for b in (batch, batch, batch // 2 + 1):
            t.step(mnist_batch(b)).item()
        print("RESULT {}")
        return
    batch_data = mnist_batch(batch)
    for _ in range(3 + config.tier_up_runs):
        t.step(batch_data)
    lazymlir.wait_device_ops()
    lazymlir.cache.wait_background_compiles()

    def run():
        t.step(batch_data)
        lazymlir.wait_device_ops()

    seconds = timing.median_seconds(run, steps)
    print(
        "RESULT "
        + json.dumps(
            {
                "seconds": seconds,
                "dynamic_runs": metrics.counter_value("DynamicGraphRun"),
                "disk_hits": metrics.counter_value("DiskCacheHit"),
            }
        )
    )


def later_process(batch, steps, rounds):
    """The MNIST CNN's step time in a process started on an empty cache
    against one started after a ragged-batch run filled it (issue 29: 20-25x
    slower before): rounds of (empty, after ragged), the median ratio."""
    import subprocess
    import tempfile

    def child(cache, *args):
        out = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--later-child", *map(str, args)],
            capture_output=True,
            text=True,
            env=dict(os.environ, LAZYMLIR_CACHE_DIR=cache),
            timeout=900,
        )
        line = [line_ for line_ in out.stdout.splitlines() if line_.startswith("RESULT ")]
        if out.returncode != 0 or not line:
            raise RuntimeError(f"bench_dynamic child failed: {out.stderr[-2000:]}")
        return json.loads(line[-1][len("RESULT ") :])

    pairs = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as filled:
            cold = child(empty, batch, steps, 0)
            child(filled, batch, steps, 1)
            after = child(filled, batch, steps, 0)
            pairs.append((cold, after))
    return {
        "batch": batch,
        "empty_ms": statistics.median(c["seconds"] for c, _ in pairs) * 1e3,
        "after_ragged_ms": statistics.median(a["seconds"] for _, a in pairs) * 1e3,
        "ratio": statistics.median(a["seconds"] / c["seconds"] for c, a in pairs),
        "dynamic_runs_after_ragged": max(a["dynamic_runs"] for _, a in pairs),
        "disk_hits_after_ragged": min(a["disk_hits"] for _, a in pairs),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sweeps, one timed size (for make test)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3, help="(dynamic, static) rounds per timed size")
    parser.add_argument("--json", default=None)
    parser.add_argument("--later-child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.later_child:
        torch.set_num_threads(1)
        later_process_child(*args.later_child)
        return
    if args.smoke:
        args.rounds = 1
    torch.set_num_threads(1)

    families = {
        "mlp": (mlp(), nll_loss, mlp_batch),
        "mnist": (mnist(), nll_loss, mnist_batch),
        "resnet": (resnet(), nll_loss, resnet_batch),
        "resnet_cl": (resnet(), nll_loss, resnet_cl_batch),
    }
    if args.smoke:
        lm_sizes = [8, 16, 24]
        plan = [("mlp", "MLP", [1, 2, 3, 5]), ("mnist", "MNIST CNN", [2, 3, 5])]
        timed = [("mlp", 5, [2, 3, 4]), ("mnist", 5, [2, 3, 4])]
    else:
        lm_sizes = list(range(8, 129, 8))
        plan = [
            ("mlp", "MLP", list(range(1, 65))),
            ("mnist", "MNIST CNN", [64, 64, 37, 50, 17, 64, 3, 29]),
            ("resnet", "ResNet block", [16, 16, 11, 7, 16, 3]),
            ("resnet_cl", "ResNet block, channels_last", [16, 16, 11, 7, 16, 3]),
        ]
        timed = [
            ("mlp", 64, [2, 3, 4]),
            ("mlp", 37, [2, 3, 4]),
            ("lm", 64, [8, 16, 24]),
            ("lm", 100, [8, 16, 24]),
            ("mnist", 64, [2, 3, 4]),
            ("mnist", 37, [2, 3, 4]),
            ("resnet", 16, [2, 3, 4]),
            ("resnet", 11, [2, 3, 4]),
            ("resnet_cl", 16, [2, 3, 4]),
        ]
    families["lm"] = (lm(max(lm_sizes)), lm_loss, lm_batch)
    with config.patch(cache_dir=None, dynamic=True):
        sweeps = [sweep(f"{title} training step, batch sizes", *families[name], sizes) for name, title, sizes in plan]
        sweeps.insert(1, sweep("2-layer LM training step, sequence lengths", *families["lm"], lm_sizes))
        sweeps.append(inference_sweep("MLP forward (no_grad), batch sizes", families["mlp"][0], mlp_batch, plan[0][2]))
        times = []
        for which, size, warm in timed:
            model, loss, make = families[which]
            repeats = max(3, args.repeats // (1 if which == "mlp" else 3))
            # Rounds of (dynamic, static), each compiled afresh: the median of
            # the per-round ratios (single rounds swing on a shared machine).
            rounds = [
                (
                    step_time(model, loss, make, size, warm, repeats, True),
                    step_time(model, loss, make, size, warm, repeats, False),
                )
                for _ in range(args.rounds)
            ]
            dyn = [d for d, _ in rounds if d is not None]
            times.append(
                {
                    "workload": which,
                    "size": size,
                    "dynamic_ms": dyn and statistics.median(dyn) * 1e3,
                    "static_ms": statistics.median(st for _, st in rounds) * 1e3,
                    "ratio": dyn and statistics.median(d / st for d, st in rounds if d is not None),
                }
            )

    later = later_process(16 if args.smoke else 64, 5 if args.smoke else args.repeats, args.rounds)

    print(
        f"torch {torch.__version__}, 1 intra-op thread for eager; lazymlir threads={config.threads or os.cpu_count()}"
    )
    print(
        f"{'sweep':66} {'graphs':>6} {'after 1st':>9} {'dynamic':>7} {'hits':>5} {'fallback':>8} {'compile s':>9} "
        f"{'max |diff|':>11}"
    )
    for s in sweeps:
        print(
            f"{s['workload'] + ' ' + s['sizes']:66} {s['graphs_compiled']:>6} {s['graphs_after_first_step']:>9} "
            f"{s['dynamic_compiles']:>7} "
            f"{s['dynamic_hits']:>5} {s['dynamic_fallbacks']:>8} {s['compile_s']:>9.1f} {s['worst_loss_diff']:>11.2e}"
        )
    print(f"{'step time at one size':66} {'static ms':>9} {'dynamic ms':>10} {'dyn/static':>10}")
    for t in times:
        dyn = f"{t['dynamic_ms']:.2f}" if t["dynamic_ms"] else "static"
        ratio = f"{t['ratio']:.2f}x" if t["ratio"] else "-"
        print(f"{t['workload'] + ' at ' + str(t['size']):66} {t['static_ms']:>9.2f} {dyn:>10} {ratio:>10}")
    print(
        f"{'MNIST CNN, a new process at batch ' + str(later['batch']):66} {'empty ms':>9} {'after ms':>10} "
        f"{'after/empty':>11}"
    )
    print(
        f"{'  on an empty cache / after a ragged-batch run':66} {later['empty_ms']:>9.2f} "
        f"{later['after_ragged_ms']:>10.2f} {later['ratio']:>10.2f}x  (dynamic runs "
        f"{later['dynamic_runs_after_ragged']}, graphs from disk {later['disk_hits_after_ragged']})"
    )
    bad = [s for s in sweeps if s["worst_loss_diff"] > 1e-3]
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"sweeps": sweeps, "step_times": times, "later_process": later}, f, indent=1)
    if bad:
        print("WRONG: losses differ from eager in", [s["workload"] for s in bad])
        sys.exit(1)


if __name__ == "__main__":
    main()
