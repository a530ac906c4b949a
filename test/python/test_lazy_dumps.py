"""LAZYMLIR_DUMP_DIR: every compiled graph is written as MLIR, and lazymlir-opt
reproduces the compilation from the linalg dump."""

import os
import shutil
import subprocess
import sys

import torch
from conftest import assert_compiled

import lazymlir
from lazymlir import config


def _lazymlir_opt():
    found = shutil.which("lazymlir-opt")
    if found:
        return found
    here = os.path.join(os.path.dirname(sys.executable), "lazymlir-opt")
    if os.path.exists(here):
        return here
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    built = os.path.join(repo, "build", "bin", "lazymlir-opt")
    return built if os.path.exists(built) else None


def _run_graph():
    x = torch.randn(4, 8).to("lazy")
    w = torch.randn(8, 3).to("lazy")
    out = torch.softmax(x @ w + 1, dim=1)
    lazymlir.mark_step()
    return out


def test_dump_files(tmp_path, fresh_cache):
    with config.patch(dump_dir=str(tmp_path)):
        _run_graph()
    names = sorted(os.listdir(tmp_path))
    hashes = {n.split(".")[0] for n in names}
    assert len(hashes) == 1, names
    (h,) = hashes
    assert f"{h}.torch.mlir" in names and f"{h}.linalg.mlir" in names
    linalg = (tmp_path / f"{h}.linalg.mlir").read_text()
    assert "func.func @main" in linalg and "linalg." in linalg
    assert "torch.aten" in (tmp_path / f"{h}.torch.mlir").read_text()
    # The same trace gives the same name: dumps are reproducible.
    lazymlir.cache.clear()
    other = tmp_path / "again"
    with config.patch(dump_dir=str(other)):
        _run_graph()
    assert sorted(os.listdir(other)) == names


def test_dump_reproduces_with_lazymlir_opt(tmp_path, native_built, fresh_cache):
    with config.patch(dump_dir=str(tmp_path)):
        _run_graph()
    assert_compiled()
    names = os.listdir(tmp_path)
    (h,) = {n.split(".")[0] for n in names}
    assert f"{h}.llvm.mlir" in names
    tool = _lazymlir_opt()
    assert tool is not None, "lazymlir-opt not found (PATH, next to python, build/bin)"
    res = subprocess.run(
        [tool, str(tmp_path / f"{h}.linalg.mlir"), "--lazymlir-cpu-pipeline"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "llvm.func" in res.stdout
