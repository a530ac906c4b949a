"""The lazy device end to end: the tutorial's control-flow example, then MLP
inference steps on the lazy device, timed against eager PyTorch in the same run."""

import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import lazymlir


def add_two_maybe(t: torch.Tensor, maybe: torch.Tensor):
    if maybe:  # Python control flow on a lazy tensor: a barrier
        return t + 2
    return t


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def time_steps(step, steps):
    samples = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main():
    torch.manual_seed(0)
    t = torch.ones(1)
    for maybe in (torch.BoolTensor([0]), torch.BoolTensor([1])):
        lazy = add_two_maybe(t.to("lazy"), maybe.to("lazy"))
        assert torch.equal(lazy.cpu(), add_two_maybe(t, maybe))
        print(f"add_two_maybe(maybe={bool(maybe)}) = {lazy.cpu().tolist()}  (matches eager)")

    model = MLP().eval()
    x = torch.randn(64, 784)
    with torch.no_grad():
        expected = model(x)
        lazy_model = MLP().eval()
        lazy_model.load_state_dict(model.state_dict())
        lazy_model.to("lazy")
        x_lazy = x.to("lazy")

        def lazy_step():
            out = lazy_model(x_lazy)
            lazymlir.mark_step()
            lazymlir.wait_device_ops()
            return out

        out = lazy_step()  # compiles
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-5)
        lazy_s = time_steps(lazy_step, 50)
        eager_s = time_steps(lambda: model(x), 50)
    print(f"MLP 784-256-10, batch 64: lazymlir {lazy_s * 1e3:.3f} ms/step (median), "
          f"eager {eager_s * 1e3:.3f} ms/step, ratio lazymlir/eager {lazy_s / eager_s:.2f}")
    print()
    print(lazymlir.metrics.metrics_report())
    print("cache:", lazymlir.cache.stats())


if __name__ == "__main__":
    main()
