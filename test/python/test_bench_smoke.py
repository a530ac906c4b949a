"""`make bench`'s suite (bench/suite.py) on tiny sizes: it runs, every
workload has numeric eager and lazymlir medians (or says why not), every
lazymlir row compiled and matched eager, and the JSON and the PNG chart are
written. Runs in a subprocess with this session's environment (its private
LAZYMLIR_CACHE_DIR, set by conftest.py)."""

import json
import os
import subprocess
import sys
import pytest

# The slow tier (make test-slow, CI): bench/suite.py in child processes.
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUITE = os.path.join(ROOT, "bench", "suite.py")

WORKLOADS = {
    "bert",
    "gpt2",
    "bert512",
    "gpt2_512",
    "bert512_bf16",
    "gpt2_512_bf16",
    "vit512",
    "lm2",
    "bert_read1",
    "gpt2_read1",
    "lm2_read1",
    "bert_read10",
    "gpt2_read10",
    "lm2_read10",
    "mnist",
    "mlp",
    "chain",
    "softmax",
    "layernorm",
    "matmul_512",
    "matmul_1024",
    "matmul_2048",
    "gemm_ffn_up",
    "gemm_ffn_down",
    "gemm_ffn_dw",
    "gemm_ffn_up_bf16",
    "gemm_ffn_down_bf16",
    "resnet_block",
    "trace_overhead",
    "compile_cold_mnist",
    "compile_warm_mnist",
    "compile_cold_lm2",
    "compile_warm_lm2",
    "generate",
    "generate_tc",
    "bert_tc",
    "gpt2_tc",
    "lm2_tc",
    "tc_call_overhead",
    "bert_tiny_infer",
    "bert_tiny_infer_tc",
    "bert512_infer",
    "bert512_infer_tc",
    "bertbase_read1",
    "bertbase_read10",
    "bertbase_rss",
    "bertbase_first2",
}


def test_bench_suite_smoke(native_built, tmp_path):
    proc = subprocess.run(
        [sys.executable, SUITE, "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=900,  # ~270 s on a quiet 2-core host
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "memory bandwidth:" in proc.stdout and "matmul peak:" in proc.stdout, proc.stdout
    result = json.loads((tmp_path / "latest.json").read_text())
    assert result["smoke"] and result["machine"]["bandwidth_gbs"] > 0 and result["machine"]["matmul_gflops"] > 0
    rows = {row["name"]: row for row in result["workloads"]}
    assert set(rows) == WORKLOADS, sorted(rows)
    for name, row in rows.items():
        for peer in ("eager", "lazymlir"):
            r = row["peers"][peer]
            assert isinstance(r.get("median"), float) and r["median"] > 0 and r["samples"], (name, peer, r)
            assert not r.get("wrong"), (name, peer, r)
        for peer in ("torch.compile", "torch._lazy"):  # not run in smoke: an explicit reason
            r = row["peers"][peer]
            assert "median" in r or r.get("cell") in ("skipped", "n/a"), (name, peer, r)
        compiled = row["lazymlir_compiled"]
        assert compiled and compiled.startswith("compiled"), (name, compiled, proc.stderr[-3000:])
        if name.startswith("compile_warm"):
            assert row["peers"]["lazymlir"]["disk_hits"] > 0, row  # the second process loaded from disk
        if name in (
            "bert",
            "gpt2",
            "bert512",
            "gpt2_512",
            "vit512",
            "lm2",
            "mnist",
            "chain",
            "matmul_1024",
            "gemm_ffn_dw",
            "gemm_ffn_up_bf16",
            "bert512_bf16",
            "bert_tiny_infer",
            "bert_tiny_infer_tc",
            "bertbase_read1",
            "bertbase_rss",
        ):
            assert row["target"] and row["target_status"], row
    png = tmp_path / "latest.png"
    assert png.exists() and png.stat().st_size > 1000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_suite_torch_lazy_child(native_built, tmp_path):
    """The torch._lazy peer runs in a child that loads lazymlir.testing from
    its file without importing lazymlir (both use the lazy device): it finds
    it in this install (an editable one lists the native module's directory
    first) and matches eager."""
    proc = subprocess.run(
        [sys.executable, SUITE, "--smoke", "--ltc", "--only", "mlp", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    row = json.loads((tmp_path / "latest.json").read_text())["workloads"][0]
    r = row["peers"]["torch._lazy"]
    assert isinstance(r.get("median"), float) and r["median"] > 0 and not r.get("wrong"), (r, proc.stdout[-2000:])


def test_bench_dynamic_smoke(native_built, tmp_path):
    """bench/bench_dynamic.py on tiny sweeps: it runs, every size matched
    eager (the script exits non-zero otherwise), each sweep compiled one
    dynamic graph and fell back nowhere, and the timed size ran dynamic."""
    out = tmp_path / "dynamic.json"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "bench", "bench_dynamic.py"),
            "--smoke",
            "--repeats",
            "3",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    for sweep in result["sweeps"]:
        assert sweep["dynamic_compiles"] == 1 and sweep["dynamic_fallbacks"] == 0, sweep
        assert sweep["eager_fallbacks"] == 0 and sweep["worst_loss_diff"] < 1e-3, sweep
    for row in result["step_times"]:
        assert row["dynamic_ms"] is not None and row["ratio"] is not None, row
    later = result["later_process"]  # after a ragged-batch run: the static graphs from disk, no dynamic run
    assert later["dynamic_runs_after_ragged"] == 0 and later["disk_hits_after_ragged"] >= 1, later
    assert later["empty_ms"] > 0 and later["after_ragged_ms"] > 0, later
