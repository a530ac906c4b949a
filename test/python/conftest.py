"""Shared fixtures for the lazy-device tests: seeding, clean metrics, and the
check that a test's work was compiled rather than run eagerly."""

import os
import random
import tempfile

import pytest
import torch

import lazymlir
from lazymlir import metrics, testing


# The persistent compile cache of the test session: its own directory (child
# processes inherit it), not the user's, unless LAZYMLIR_CACHE_DIR says where.
if "LAZYMLIR_CACHE_DIR" not in os.environ:
    _session_cache = tempfile.TemporaryDirectory(prefix="lazymlir-test-cache-")
    os.environ["LAZYMLIR_CACHE_DIR"] = _session_cache.name
    lazymlir.config.cache_dir = _session_cache.name

# The native compiler comes from the C++ build.
HAVE_NATIVE = lazymlir.execution.entries.native_compiler() is not None


@pytest.fixture(autouse=True)
def _seed_and_reset():
    random.seed(0)
    torch.manual_seed(0)
    lazymlir.mark_step()  # nothing pending from an earlier test
    metrics.reset()
    # Each test's graphs generalize to dynamic ones from its own traces only:
    # a test that compiles a graph for batch 2 after another test's batch 1
    # gets a static graph (compiled graphs stay cached, by exact trace).
    lazymlir.trace.dynamic.clear()
    # Whether mark_step() runs its step itself (the last steps were waited
    # for at once) depends on earlier steps: each test starts with the worker.
    from lazymlir.execution import run

    run._handed, run._waited_at_once = None, 0
    yield


@pytest.fixture
def fresh_cache():
    lazymlir.cache.clear()
    yield lazymlir.cache
    lazymlir.cache.clear()


@pytest.fixture
def native_built():
    """For tests that prove work was compiled: the native compiler must be built
    (a missing build is a failure, not a skip)."""
    assert HAVE_NATIVE, "lazymlir.execution.native / lazymlir._native is not importable: build with `make`"


def assert_compiled(*allowed_fallbacks):
    """The graphs ran compiled: something compiled (or hit the cache), no graph
    fell back to eager, and no op ran eagerly except ``allowed_fallbacks``."""
    compiled = metrics.counter_value("UncachedCompile") + metrics.counter_value("CachedCompile")
    assert compiled > 0, metrics.metrics_report()
    assert metrics.counter_value("CompileFallback") == 0, metrics.metrics_report()
    assert metrics.counter_value("EagerGraph") == 0, metrics.metrics_report()
    assert sorted(metrics.executed_fallback_ops()) == sorted(allowed_fallbacks), metrics.metrics_report()


def hf_model(name, llama_hidden=128):
    """lazymlir.testing.hf_model at the sizes the training tests use (2
    layers, vocabulary 100, batches of 2 x 16 tokens; LLaMA with 4 heads, 2
    of them key/value heads): (model, make_batch(device), loss(model, batch))."""
    pytest.importorskip("transformers")
    if name == "llama":
        sizes = dict(hidden=llama_hidden, heads=4, intermediate=2 * llama_hidden)
    else:
        sizes = dict(hidden=32, heads=2, intermediate=64)
    return testing.hf_model(name, vocab=100, layers=2, seq=16, batch=2, **sizes)
