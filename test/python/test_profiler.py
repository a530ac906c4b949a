"""lazymlir.profile(): per-kernel times of compiled graphs, their aten ops,
shapes, GB/s and GFLOP/s, the Chrome trace, LAZYMLIR_PROFILE=1, and graph runs
as torch.profiler ranges."""

import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from conftest import assert_compiled

import lazymlir
from lazymlir import metrics


def _mlp(x, w1, b1, w2):
    return torch.softmax(F.linear(F.relu(F.linear(x, w1, b1)), w2), -1)


def _inputs():
    return torch.randn(64, 128), torch.randn(256, 128) * 0.1, torch.randn(256), torch.randn(32, 256) * 0.1


def test_profile_table_rows_and_results(native_built, fresh_cache):
    args = _inputs()
    lazy = [a.to("lazy") for a in args]
    with lazymlir.profile() as p:
        for _ in range(3):
            out = _mlp(*lazy)
            lazymlir.mark_step()
    torch.testing.assert_close(out.cpu(), _mlp(*args))
    assert_compiled()
    rows = p.rows()
    # Compiled kernels, and calls of the runtime GEMM (lazymlir-gemm-calls).
    assert rows and all(r.kernel.startswith(("__lazymlir_k_", "lazymlir_sgemm")) for r in rows), rows
    # Every kernel ran once per step; sorted by total time.
    assert {r.calls for r in rows} == {3}, rows
    assert [r.seconds for r in rows] == sorted((r.seconds for r in rows), reverse=True)
    # The kernels name the aten ops they came from: the first linear's
    # contraction (addmm, its bias and the relu fused) reads x (64x128) and
    # w1 (256x128, or its transpose) and does >= 2*64*256*128 flops.
    first = [r for r in rows if "aten.addmm" in r.ops and r.shapes.startswith("64x128xf32")]
    assert first, [(r.ops, r.shapes) for r in rows]
    assert first[0].flops >= 2 * 64 * 256 * 128 and first[0].bytes >= 4 * (64 * 128 + 256 * 128), first[0]
    assert first[0].gflop_per_s > 0 and first[0].gb_per_s > 0
    assert any("aten._softmax" in r.ops for r in rows), [r.ops for r in rows]
    kernels = sum(r.seconds for r in rows)
    assert 0 < kernels <= p.graph_seconds()
    table = p.table()
    assert "GFLOP/s" in table and "aten._softmax" in table and "k_" in table
    # Profiling ends with the block: the next step runs the plain graph.
    assert not lazymlir.execution.profiler.active and not lazymlir.config.profile
    before = len(p.kernel_calls)
    out = _mlp(*lazy)
    lazymlir.mark_step()
    torch.testing.assert_close(out.cpu(), _mlp(*args))
    assert len(p.kernel_calls) == before


def test_chrome_trace(native_built, fresh_cache, tmp_path):
    args = [a.to("lazy") for a in _inputs()]
    with lazymlir.profile() as p:
        out = _mlp(*args)  # noqa: F841 (a live output: the graph runs)
        lazymlir.mark_step()
    path = tmp_path / "trace.json"
    p.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    graphs = [e for e in events if e.get("cat") == "lazymlir.graph"]
    kernels = [e for e in events if e.get("cat") == "lazymlir.kernel"]
    assert len(graphs) == 1 and len(kernels) == len(p.kernel_calls) > 1
    g = graphs[0]
    for k in kernels:  # each kernel call lies inside its graph's run
        assert g["ts"] <= k["ts"] and k["ts"] + k["dur"] <= g["ts"] + g["dur"] + 1e-3, (g, k)
        assert k["args"]["kernel"].startswith(("__lazymlir_k_", "lazymlir_sgemm")) and k["tid"] == g["tid"]


def test_nested_profiles_each_see_their_runs(native_built, fresh_cache):
    args = [a.to("lazy") for a in _inputs()]
    with lazymlir.profile() as outer:
        out = _mlp(*args)
        lazymlir.mark_step()
        with lazymlir.profile() as inner:
            out = _mlp(*args)
            lazymlir.mark_step()
        out = _mlp(*args)  # noqa: F841
        lazymlir.mark_step()
    assert len(inner.graph_runs) == 1 and len(outer.graph_runs) == 3
    assert {r.calls for r in outer.rows()} == {3} and {r.calls for r in inner.rows()} == {1}


def test_eager_graphs_show_as_rows(fresh_cache):
    with lazymlir.config.patch(force_eager=True), lazymlir.profile() as p:
        (torch.randn(8, 8).to("lazy") * 2).sum().item()
    rows = p.rows()
    assert [r.kernel for r in rows] == ["(eager graph)"] and "aten.mul" in rows[0].ops, rows
    assert metrics.counter_value("EagerGraph") == 1


def test_graph_runs_are_torch_profiler_ranges(native_built, fresh_cache):
    x = torch.randn(16, 16)
    with lazymlir.config.patch(async_execution=False):
        y = x.to("lazy")
        lazymlir.mark_step()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out = (y @ y).relu()
            lazymlir.mark_step()
            out = out.cpu()
    torch.testing.assert_close(out, (x @ x).relu())
    names = [e.name for e in prof.events()]
    assert any(n.startswith("lazymlir.graph ") for n in names), names


def test_profile_env_prints_table_at_exit(native_built):
    script = "import torch, lazymlir\nx = torch.randn(32, 32).to('lazy')\nprint(float((x @ x).relu().sum().item()))\n"
    env = dict(os.environ, LAZYMLIR_PROFILE="1")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "lazymlir profile:" in proc.stderr and "GFLOP/s" in proc.stderr, proc.stderr
    assert "aten.mm" in proc.stderr, proc.stderr
