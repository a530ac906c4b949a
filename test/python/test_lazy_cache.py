"""The compilation cache: hits over repeated steps, retrace and recompile when an
input's shape or dtype changes, statistics and clear()."""

import torch
from conftest import assert_compiled

import lazymlir
from lazymlir import cache, metrics


def step(x, w):
    y = (x @ w).relu() * 0.5 + 1
    lazymlir.mark_step()
    return y


def test_hits_and_misses(native, fresh_cache):
    w = torch.randn(4, 3).to("lazy")
    lazymlir.mark_step()
    for _ in range(5):
        step(torch.randn(2, 4).to("lazy"), w)
    s = cache.stats()
    assert (s.misses, s.hits, s.entries) == (1, 4, 1), s
    assert s.compile_seconds > 0
    assert metrics.counter_value("UncachedCompile") == 1
    assert metrics.counter_value("CachedCompile") == 4
    assert_compiled()


def test_shape_and_dtype_changes_recompile(native, fresh_cache):
    w = torch.randn(4, 3, dtype=torch.float64)
    x = torch.randn(2, 4, dtype=torch.float64)
    out = step(x.to("lazy"), w.to("lazy"))
    torch.testing.assert_close(out.cpu(), (x @ w).relu() * 0.5 + 1)
    step(torch.randn(5, 4, dtype=torch.float64).to("lazy"), w.to("lazy"))  # new shape
    step(x.float().to("lazy"), w.float().to("lazy"))  # new dtype
    out = step(x.to("lazy"), w.to("lazy"))  # the first graph again
    torch.testing.assert_close(out.cpu(), (x @ w).relu() * 0.5 + 1)
    s = cache.stats()
    assert (s.misses, s.hits, s.entries) == (3, 1, 3), s
    assert metrics.counter_value("UncachedCompile") == 3
    assert metrics.counter_value("RecompileShapeChange") == 1  # the dtype change is a new structure
    assert_compiled()


def test_clear(fresh_cache):
    with lazymlir.config.patch(force_eager=True):
        step(torch.randn(2, 4).to("lazy"), torch.randn(4, 3).to("lazy"))
    assert cache.stats().entries == 1
    cache.clear()
    assert cache.stats() == (0, 0, 0, 0.0, 0, 0)


def test_tracer_state_does_not_leak_into_key(fresh_cache):
    """Same computation reached through different tensor histories hits."""
    with lazymlir.config.patch(force_eager=True):
        a = torch.randn(3).to("lazy")
        (a * 2).cpu()
        b = (torch.randn(3).to("lazy") + 0).cpu().to("lazy")
        (b * 2).cpu()
    assert cache.stats().hits == 1
