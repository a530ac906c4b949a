"""Issue 16: the persistent compile cache and kernel deduplication.

Each "process" here is a fresh Python process training a small model with a
given LAZYMLIR_CACHE_DIR: the first compiles and fills the directory, a
second one finds every graph on disk and compiles nothing; a corrupt entry
is reported, ignored and written again; two processes filling one directory
at once both finish right; LAZYMLIR_CACHE_DIR= (empty) keeps nothing.
Results are checked against eager PyTorch in every process."""

import glob
import json
import os
import subprocess
import sys

import pytest

import torch
from conftest import assert_compiled

import lazymlir
from lazymlir import cache, metrics

_SCRIPT = r"""
import json, warnings
import torch, lazymlir
from lazymlir import metrics

def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16),
                               torch.nn.Tanh(), torch.nn.Linear(16, 3))

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    results = []
    for device in ("cpu", "lazy"):
        model = make().to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        torch.manual_seed(1)
        losses = []
        for step in range(4):
            x, y = torch.randn(8, 12), torch.randint(0, 3, (8,))
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            if device == "lazy":
                lazymlir.mark_step()
            losses.append(float(loss))
        results.append((losses, [p.detach().cpu() for p in model.parameters()]))
(eager_losses, eager_params), (lazy_losses, lazy_params) = results
report = lazymlir.metrics.compile_report()
print(json.dumps({
    "max_loss_diff": max(abs(a - b) for a, b in zip(eager_losses, lazy_losses)),
    "max_param_diff": max(float((a - b).abs().max()) for a, b in zip(eager_params, lazy_params)),
    "disk_hits": lazymlir.cache.stats().disk_hits,
    "disk_misses": lazymlir.cache.stats().disk_misses,
    "kernels_compiled": report["kernels_compiled"],
    "lowerings": len(metrics.timing_samples("LoweringTime")),
    "compiled": metrics.counter_value("UncachedCompile") + metrics.counter_value("CachedCompile"),
    "fallback": metrics.counter_value("CompileFallback") + metrics.counter_value("EagerGraph"),
    "warnings": [str(w.message) for w in caught if "cache" in str(w.message)],
}))
"""


def _start(cache_dir, **env_changes):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_") and k != "XDG_CACHE_HOME"}
    if cache_dir is not None:
        env["LAZYMLIR_CACHE_DIR"] = cache_dir
    env.update(env_changes)
    return subprocess.Popen(
        [sys.executable, "-c", _SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _finish(proc):
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    r = json.loads(out.strip().splitlines()[-1])
    assert r["max_loss_diff"] < 1e-4 and r["max_param_diff"] < 1e-4, r
    assert r["compiled"] > 0 and r["fallback"] == 0, r
    return r


def _run(cache_dir, **env_changes):
    return _finish(_start(cache_dir, **env_changes))


def _entries(cache_dir):
    return sorted(glob.glob(os.path.join(cache_dir, "*.lmc")))


def test_second_process_compiles_nothing(native_built, tmp_path):
    first = _run(str(tmp_path))
    assert first["kernels_compiled"] > 0 and first["disk_hits"] == 0 and first["disk_misses"] > 0, first
    assert _entries(str(tmp_path))
    second = _run(str(tmp_path))
    # Every graph from disk: no torch-mlir lowering, no kernel compiled.
    assert second["disk_hits"] == first["disk_misses"] and second["disk_misses"] == 0, second
    assert second["kernels_compiled"] == 0 and second["lowerings"] == 0, second
    assert not second["warnings"], second


@pytest.mark.slow
def test_corrupt_entries_are_reported_and_rewritten(native_built, tmp_path):
    _run(str(tmp_path))
    entries = _entries(str(tmp_path))
    sizes = {}
    for i, path in enumerate(entries):
        with open(path, "r+b") as f:
            data = f.read()
            sizes[path] = len(data)
            f.seek(0)
            if i % 2:  # truncated
                f.truncate(len(data) // 2)
            else:  # one byte flipped in the payload
                f.seek(len(data) - 1)
                f.write(bytes([data[-1] ^ 0xFF]))
    second = _run(str(tmp_path))
    assert second["warnings"] and all("corrupt" in w for w in second["warnings"]), second
    assert second["kernels_compiled"] > 0, second  # compiled again, right (checked in _finish)
    third = _run(str(tmp_path))
    assert third["kernels_compiled"] == 0 and third["disk_misses"] == 0 and not third["warnings"], third


@pytest.mark.slow
def test_two_processes_fill_one_cache_at_once(native_built, tmp_path):
    procs = [_start(str(tmp_path)) for _ in range(2)]
    for proc in procs:
        _finish(proc)
    assert not glob.glob(os.path.join(str(tmp_path), "*.tmp.*"))  # every write renamed into place
    third = _run(str(tmp_path))
    assert third["kernels_compiled"] == 0 and third["disk_misses"] == 0 and not third["warnings"], third


@pytest.mark.slow
def test_default_location_and_disabled(native_built, tmp_path):
    """By default the cache lives in $XDG_CACHE_HOME/lazymlir, else
    ~/.cache/lazymlir; LAZYMLIR_CACHE_DIR= (empty) keeps nothing anywhere."""
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    home.mkdir()
    r = _run(None, HOME=str(home), XDG_CACHE_HOME=str(xdg))
    assert r["disk_misses"] > 0 and _entries(str(xdg / "lazymlir")), r
    r = _run(None, HOME=str(home))
    assert r["disk_misses"] > 0 and _entries(str(home / ".cache" / "lazymlir")), r
    for path in _entries(str(home / ".cache" / "lazymlir")):
        os.remove(path)
    r = _run("", HOME=str(home), XDG_CACHE_HOME=str(xdg / "off"))
    assert r["disk_hits"] == 0 and r["disk_misses"] == 0 and r["kernels_compiled"] > 0, r
    assert not _entries(str(home / ".cache" / "lazymlir")) and not os.path.exists(xdg / "off"), r


def test_disk_keys_cover_every_python_source_of_the_package():
    """A disk entry is keyed by the sources that decided it: the tracer's
    metadata (frontend/meta.py: an output's dtype), the lowering and the
    runtime's Python, not execution/ alone (a stale graph from before a
    frontend change then failed: "output #1: element type bf16, expected
    f32")."""
    from lazymlir.execution import cache

    root = os.path.dirname(lazymlir.__file__)
    hashed = {os.path.relpath(p, root) for p in cache._sources()}
    for name in ("frontend/meta.py", "lowering/opmath.py", "trace/ir.py", "execution/cache.py", "config.py"):
        assert name in hashed, sorted(hashed)


def _mlp(width, depth):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers)


def test_identical_layers_compile_one_set_of_kernels(native_built, fresh_cache, tmp_path):
    """Two identical layers (same shapes) run the same loop nests: each is
    compiled once, and a graph with four such layers compiles nothing new."""
    torch.manual_seed(0)
    x = torch.randn(32, 64)
    with lazymlir.config.patch(cache_dir=None):
        for depth in (1, 2, 4):
            model = _mlp(64, depth)
            expected = model(x)
            metrics.reset()
            got = model.to("lazy")(x.to("lazy")).cpu()
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
            assert_compiled()
            nests = metrics.sample_values("LoopNestsPerGraph")[-1]
            distinct = metrics.sample_values("DistinctKernelsPerGraph")[-1]
            compiled = metrics.sample_values("KernelsCompiled")[-1]
            if depth == 1:
                one_layer = distinct
            elif depth == 2:
                assert nests >= 2 * one_layer and distinct == one_layer, (nests, distinct, one_layer)
                assert compiled == 0, compiled  # the layer's kernels came from the depth-1 graph
            else:
                assert distinct == one_layer and compiled == 0, (distinct, compiled)


def test_graph_from_disk_in_process(native_built, fresh_cache, tmp_path):
    """A graph not in memory (cache.clear()) comes back from disk: counted as a
    disk hit, no lowering, the same results."""
    x, w = torch.randn(5, 7), torch.randn(7, 3)
    with lazymlir.config.patch(cache_dir=str(tmp_path)):
        first = ((x.to("lazy") @ w.to("lazy")).relu() + 2).cpu()
        assert cache.stats().disk_misses == 1
        cache.clear()
        metrics.reset()
        second = ((x.to("lazy") @ w.to("lazy")).relu() + 2).cpu()
        assert cache.stats().disk_hits == 1 and metrics.counter_value("DiskCacheHit") == 1
        assert not metrics.timing_samples("LoweringTime")
    torch.testing.assert_close(first, (x @ w).relu() + 2)
    torch.testing.assert_close(second, first)


def test_size_limit_evicts_least_recently_used(native_built, fresh_cache, tmp_path):
    d = str(tmp_path)
    with lazymlir.config.patch(cache_dir=d, cache_max_bytes=1 << 30):
        (torch.randn(3, 3).to("lazy").sin() * 3).cpu()
    total = sum(os.path.getsize(p) for p in _entries(d))
    before = lazymlir.execution.native.disk_cache_counts()["evicted"]
    # A limit below what is there: the next write evicts the oldest entries.
    with lazymlir.config.patch(cache_dir=d, cache_max_bytes=total // 2):
        (torch.randn(4, 4).to("lazy").cos() - 1).cpu()
    assert lazymlir.execution.native.disk_cache_counts()["evicted"] > before
    assert sum(os.path.getsize(p) for p in _entries(d)) <= total // 2


def test_verbose_reports_phases(native_built, fresh_cache, capsys):
    with lazymlir.config.patch(verbose=True, cache_dir=None):
        (torch.randn(6, 5).to("lazy").exp() + 1).cpu()
    out = capsys.readouterr().out
    assert "distinct kernels" in out and "Codegen" in out and "LLVM instructions" in out, out
    report = metrics.compile_report()
    assert report["graphs"] == 1 and report["phases"]["codegen"] > 0 and report["kernels"] >= 1, report


def test_tiered_compile_switches_to_optimized_code(native_built, fresh_cache):
    """Kernels first compiled with little code generation effort are
    recompiled at full effort once their graph ran four times; runs then switch to
    that code. Results agree with eager before and after the switch."""
    torch.manual_seed(0)
    w, b = torch.randn(48, 40), torch.randn(40)
    xs = [torch.randn(16, 48) for _ in range(8)]

    def step(x, w=w, b=b):
        return torch.nn.functional.gelu(x @ w + b).softmax(-1).sum(0)

    before = lazymlir.execution.native.background_compile_counts()
    with lazymlir.config.patch(cache_dir=None, tiered=True):
        lw, lb = w.to("lazy"), b.to("lazy")
        got = [step(x.to("lazy"), lw, lb).cpu() for x in xs[:5]]
        entries = [e for e in cache._entries.values() if hasattr(e, "executable")]
        assert entries
        lazymlir.cache.wait_background_compiles()
        assert all(e.executable.fully_optimized for e in entries)
        got += [step(x.to("lazy"), lw, lb).cpu() for x in xs[5:]]
    after = lazymlir.execution.native.background_compile_counts()
    assert after["graphs_relinked"] > before["graphs_relinked"], (before, after)
    for x, g in zip(xs, got):
        torch.testing.assert_close(g, step(x), rtol=1e-5, atol=1e-6)
    assert_compiled()


_EXIT_SCRIPT = r"""
import torch, lazymlir
x = torch.randn(256, 256)
for i in range(6):
    y = (x.to("lazy") @ x.to("lazy")).tanh().softmax(-1) * (i + 1)
    lazymlir.mark_step()
print(float(y.sum()))
"""


@pytest.mark.slow
def test_exit_while_background_compiling(native_built, tmp_path):
    """A process may exit while the background compiler recompiles a hot
    graph's kernels: it stops after the kernel at hand, and the exit is clean."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}
    env["LAZYMLIR_CACHE_DIR"] = ""
    for _ in range(4):
        out = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
