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


def test_hits_and_misses(native_built, fresh_cache):
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


def test_shape_and_dtype_changes_recompile(native_built, fresh_cache):
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


def test_recompile_storm_warning(fresh_cache):
    """One graph structure compiled for config.recompile_warning_at shapes
    warns once, naming the count; 0 never warns."""
    import warnings

    w = torch.randn(4, 3).to("lazy")
    with (
        lazymlir.config.patch(force_eager=True, recompile_warning_at=3),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        for rows in (1, 2, 3, 4):
            step(torch.randn(rows, 4).to("lazy"), w)
    storms = [str(c.message) for c in caught if "different input shapes" in str(c.message)]
    assert len(storms) == 1 and "compiled for 3 different input shapes" in storms[0], storms
    assert metrics.counter_value("RecompileShapeChange") == 3
    with (
        lazymlir.config.patch(force_eager=True, recompile_warning_at=0),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        for rows in (5, 6, 7, 8, 9):
            step(torch.randn(rows, 4).to("lazy"), w)
    assert not [c for c in caught if "different input shapes" in str(c.message)]


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
