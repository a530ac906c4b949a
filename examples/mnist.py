"""The Lazy Tensor tutorial's MNIST training, on lazymlir's lazy device.

    python examples/mnist.py                 # scikit-learn's handwritten digits, upscaled to 28x28
    python examples/mnist.py --data DIR      # MNIST IDX files (train-images-idx3-ubyte[.gz], ...)

The network, optimizer and loop are the tutorial's (two convs, dropout, two
linear layers, log_softmax, nll_loss, Adadelta lr=1, StepLR gamma=0.7, batch
64, mark_step() after each step).  It prints the tutorial's progress lines, the
test accuracy, a short metrics report, the cache statistics and the time per
training step of lazymlir against eager PyTorch, measured in this run.
"""

import argparse
import copy
import gzip
import os
import statistics
import struct
import time

import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR

import lazymlir
from lazymlir import metrics
from lazymlir.testing import MnistNet, train_step


# The tutorial's network (defined in lazymlir.testing, shared with the tests
# and benchmarks).
Net = MnistNet


MEAN, STD = 0.1307, 0.3081  # the tutorial's Normalize((0.1307,), (0.3081,))


def _read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        (magic,) = struct.unpack(">I", f.read(4))
        dims = struct.unpack(">" + "I" * (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).reshape(dims)


def _find(directory, stem):
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        for sub in ("", "MNIST/raw", "raw"):
            path = os.path.join(directory, sub, name)
            if os.path.exists(path):
                return path
    raise FileNotFoundError(f"no {stem}[.gz] under {directory}")


def load_mnist(directory):
    def images(stem):
        return ((_read_idx(_find(directory, stem)).float() / 255 - MEAN) / STD).unsqueeze(1)

    def labels(stem):
        return _read_idx(_find(directory, stem)).long()

    return (
        (images("train-images-idx3-ubyte"), labels("train-labels-idx1-ubyte")),
        (images("t10k-images-idx3-ubyte"), labels("t10k-labels-idx1-ubyte")),
        "MNIST",
    )


def load_digits(test_fraction=1 / 6):
    """scikit-learn's 1797 handwritten digits (8x8, 0..16), upscaled to 20x20
    and centered in 28x28 like MNIST's digits: real digits, no download."""
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = F.pad(F.interpolate(x, size=(20, 20), mode="bilinear", align_corners=False), (4, 4, 4, 4))
    x = (x.clamp(0, 1) - MEAN) / STD
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    n_test = int(len(y) * test_fraction)
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test]), "sklearn digits upscaled to 28x28"


def train(log_interval, model, device, train_loader, optimizer, epoch, step_times):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        t0 = time.perf_counter()
        loss = train_step(model, optimizer, data, target, device)
        step_times.append(time.perf_counter() - t0)
        if batch_idx % log_interval == 0:
            print(
                "Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                    epoch,
                    batch_idx * len(data),
                    len(train_loader.dataset),
                    100.0 * batch_idx / len(train_loader),
                    loss.item(),
                )
            )


def test(model, device, test_loader):
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data.to(device))
            correct += output.argmax(dim=1).eq(target.to(device)).sum()
            if device == "lazy":
                lazymlir.mark_step()
    return correct.item() / len(test_loader.dataset)


def time_steps(model, device, batches, steps):
    """Seconds per training step (median of per-step times; for lazymlir a step
    ends when its graph has run, so asynchronous execution is included)."""
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    model.train()
    samples = []
    if device == "lazy":  # the steady state: kernels recompiled at full effort
        lazymlir.cache.wait_background_compiles()
    for i in range(steps):
        data, target = batches[i % len(batches)]
        t0 = time.perf_counter()
        train_step(model, optimizer, data, target, device)
        if device == "lazy":
            lazymlir.wait_device_ops()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples[1:] if steps > 2 else samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", help="directory with the MNIST IDX files (default: scikit-learn's digits)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--log-interval", type=int, default=4)
    parser.add_argument("--max-train", type=int, default=0, help="use only the first N training images (0: all)")
    parser.add_argument("--timing-steps", type=int, default=8, help="steps timed on each device at the end")
    args = parser.parse_args()

    torch.manual_seed(1)
    (train_x, train_y), (test_x, test_y), source = load_mnist(args.data) if args.data else load_digits()
    if args.max_train:
        train_x, train_y = train_x[: args.max_train], train_y[: args.max_train]
    print(f"data: {source}: {len(train_y)} training and {len(test_y)} test images")
    train_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(train_x, train_y), batch_size=args.batch_size, shuffle=True
    )
    test_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(test_x, test_y), batch_size=1000)

    device = "lazy"
    model = Net()
    eager_model = copy.deepcopy(model)  # timed below, from the same weights
    model = model.to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    metrics.reset()
    step_times = []
    t0 = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        train(args.log_interval, model, device, train_loader, optimizer, epoch, step_times)
        scheduler.step()
    lazymlir.wait_device_ops()
    train_seconds = time.perf_counter() - t0
    compile_s = lazymlir.cache.stats().compile_seconds  # all of it during training so far
    accuracy = test(model, device, test_loader)
    print(
        f"\nTest accuracy: {100 * accuracy:.1f}% ({len(test_y)} images) after {args.epochs} epoch(s), "
        f"{train_seconds:.1f} s of training including compilation"
    )

    print("\nMetrics (lazymlir.metrics):")
    counters = {name: metrics.counter_value(name) for name in metrics.counter_names()}
    print("  counters: " + ", ".join(f"{k}={v}" for k, v in sorted(counters.items())))
    fallbacks = metrics.executed_fallback_ops()
    print(f"  ops run eagerly (aten:: counters): {', '.join(fallbacks) if fallbacks else 'none'}")
    for name in ("CollectTime", "LoweringTime", "CompileTime", "ExecuteTime"):
        samples = metrics.timing_samples(name)
        if samples:
            print(
                f"  {name:13s} {len(samples):4d} samples, total {sum(samples):8.3f} s, "
                f"median {statistics.median(samples) * 1e3:8.2f} ms"
            )
    print(f"Cache: {lazymlir.cache.stats()}")

    # Time per step, lazymlir against eager, on the same full batches.
    batches = [
        (train_x[i : i + args.batch_size], train_y[i : i + args.batch_size])
        for i in range(0, len(train_y) - args.batch_size + 1, args.batch_size)
    ][:4]
    metrics.reset()
    lazy_s = time_steps(model, device, batches, args.timing_steps)
    execute = statistics.median(metrics.timing_samples("ExecuteTime"))
    eager_s = time_steps(eager_model, "cpu", batches, args.timing_steps)
    traced = statistics.median(step_times[2:]) if len(step_times) > 3 else float("nan")
    print(
        f"\nTime per training step (batch {args.batch_size}, median of {args.timing_steps}, "
        f"{torch.get_num_threads()} threads):"
    )
    print(f"  eager PyTorch  {eager_s * 1e3:8.1f} ms")
    print(
        f"  lazymlir       {lazy_s * 1e3:8.1f} ms  ({lazy_s / eager_s:.2f}x eager): "
        f"compiled graph {execute * 1e3:.1f} ms, tracing and the rest {(lazy_s - execute) * 1e3:.1f} ms"
    )
    print(
        f"  lazymlir in the training loop above: {traced * 1e3:.1f} ms to trace a step (mark_step() returns "
        f"while the worker runs the previous one); {(train_seconds - compile_s) / len(step_times) * 1e3:.1f} ms "
        f"per step overall, compilation ({compile_s:.1f} s) excluded"
    )


if __name__ == "__main__":
    main()
