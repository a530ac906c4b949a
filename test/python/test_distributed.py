"""Issue 30: training that outgrows one process, on the lazy device. Two
processes over gloo, each on half of every batch: DistributedDataParallel
and FSDP2 (``fully_shard`` on ``init_device_mesh("lazy", (2,))``, unevenly
sharded parameters) end with the parameters eager PyTorch computes on the
whole batches in one process, with every step's compute compiled."""

import socket

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
import torch.nn as nn

WORLD = 2
STEPS = 3


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 33), nn.ReLU(), nn.Linear(33, 4))


def _data():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(STEPS)]


def _worker(rank, port, mode, results):
    import os

    import torch.distributed as dist

    import lazymlir
    from lazymlir import metrics

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        model = _model().to("lazy")
        if mode == "ddp":
            model = nn.parallel.DistributedDataParallel(model)
        else:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            mesh = init_device_mesh("lazy", (WORLD,))
            assert mesh.device_type == "lazy"
            for layer in model:
                if isinstance(layer, nn.Linear):
                    fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        metrics.reset()
        half = 8 // WORLD
        for x, y in _data():
            x, y = x[rank * half : (rank + 1) * half], y[rank * half : (rank + 1) * half]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x.to("lazy")), y.to("lazy"))
            loss.backward()
            opt.step()
            lazymlir.mark_step()
        params = [p.full_tensor() if mode == "fsdp" else p for p in model.parameters()]
        counters = {k: metrics.counter_value(k) for k in metrics.counter_names()}
        results.put((rank, [p.detach().cpu().numpy() for p in params], counters, None))
    except Exception:  # reported by the test, not lost in a child's stderr
        import traceback

        results.put((rank, None, None, traceback.format_exc()))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_two_processes_train_to_eager_parameters(native_built, mode):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(rank, port, mode, results)) for rank in range(WORLD)]
    for p in procs:
        p.start()
    try:
        got = sorted((results.get(timeout=600) for _ in procs), key=lambda r: r[0])
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    errors = [err for _, _, _, err in got if err]
    assert not errors, "\n".join(errors)

    ref = _model()
    opt = torch.optim.AdamW(ref.parameters(), lr=0.01)
    for x, y in _data():
        opt.zero_grad()
        nn.functional.cross_entropy(ref(x), y).backward()
        opt.step()
    for rank, params, counters, _ in got:
        for p, q in zip(ref.parameters(), params):
            torch.testing.assert_close(torch.from_numpy(np.array(q)), p.detach(), rtol=1e-5, atol=1e-6)
        compiled = counters.get("UncachedCompile", 0) + counters.get("CachedCompile", 0)
        assert compiled > 0 and counters.get("CompileFallback", 0) == 0, counters
        assert not [k for k in counters if k.startswith("aten::")], counters  # the compute compiled
        # The collectives ran on the device's behalf, in program order.
        assert any(k.startswith(("c10d::", "_c10d_functional::")) for k in counters), counters
