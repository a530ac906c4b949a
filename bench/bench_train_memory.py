"""Long training runs: time per step and memory of lazymlir with the default
asynchronous worker, with ``LAZYMLIR_ASYNC=0``, and of eager PyTorch.

    python bench/bench_train_memory.py [--steps 300] [--rounds 3]

Two MLPs trained with new inputs every step: a compute-heavy one (1024-2048-10,
batch 256, Adam), where running a step takes longer than tracing it (without a
bound on the steps in flight the queue grew to 10 GiB), and a small one
(784-512-10, batch 64, SGD with momentum), where tracing dominates.  Every
variant runs in a fresh process (RSS is per process), the variants
interleaved round by round; per variant the median over rounds of the time
per step (all steps, first compile included, until wait_device_ops), the RSS
at step 100 and at the end, and the peak RSS after step 10.  Ratios are
against eager measured in the same rounds.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = r"""
import json, sys, time
import torch

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

def peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

dims, batch, opt_name, steps, dev = json.loads(sys.argv[1])
if dev == "lazy":
    import lazymlir
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(dims[0], dims[1]), torch.nn.ReLU(),
                            torch.nn.Linear(dims[1], dims[2])).to(dev)
if opt_name == "adam":
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
else:
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
sync = lazymlir.wait_device_ops if dev == "lazy" else (lambda: None)
at = {}
t0 = time.perf_counter()
for i in range(steps):
    x = torch.randn(batch, dims[0]).to(dev)
    y = torch.randint(0, dims[2], (batch,)).to(dev)
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    if dev == "lazy":
        lazymlir.mark_step()
    if i in (10, 100):
        at[i] = rss()
        if i == 10:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
sync()
seconds = time.perf_counter() - t0
print(json.dumps({"step_ms": seconds / steps * 1e3, "rss100": at[100], "end": rss(), "peak": peak()}))
"""

MODELS = {
    "mlp-1024-2048-adam": ((1024, 2048, 10), 256, "adam"),
    "mlp-784-512-sgd": ((784, 512, 10), 64, "sgd"),
}
VARIANTS = {
    "eager": ("cpu", {}),
    "lazymlir async": ("lazy", {}),
    "lazymlir ASYNC=0": ("lazy", {"LAZYMLIR_ASYNC": "0"}),
}


def run(model, variant, steps):
    (dims, batch, opt), (dev, env) = MODELS[model], VARIANTS[variant]
    env = dict({k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}, **env)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps([dims, batch, opt, steps, dev])],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    mib = 1 << 20
    for model in MODELS:
        samples = {v: [] for v in VARIANTS}
        for _ in range(args.rounds):
            for variant in VARIANTS:
                samples[variant].append(run(model, variant, args.steps))
        eager_ms = statistics.median(s["step_ms"] for s in samples["eager"])
        print(f"{model}, {args.steps} steps, median of {args.rounds} rounds:")
        print(f"  {'variant':18} {'ms/step':>8} {'vs eager':>8} {'RSS@100':>8} {'RSS end':>8} {'peak>10':>8}  (MiB)")
        for variant, runs in samples.items():
            ms = statistics.median(s["step_ms"] for s in runs)

            def mem(key):
                return statistics.median(s[key] for s in runs) / mib

            print(
                f"  {variant:18} {ms:8.2f} {ms / eager_ms:7.2f}x {mem('rss100'):8.0f} {mem('end'):8.0f} "
                f"{mem('peak'):8.0f}"
            )


if __name__ == "__main__":
    main()
