"""No pass reads memory it freed (issue 29, item 0).

lazymlir-vectorize-column-reductions read an op it had just erased
(``op.getStaticLoopRanges()`` after ``replaceOp(op)``) and kept handles to
tiles across a canonicalization that replaces them. The freed memory usually
still held the op, so compiles worked, until another thread's allocation
reused it: about one fresh BERT training in a dozen aborted with ``LLVM
ERROR: SmallVector unable to grow. Requested capacity (<a pointer>)``.

glibc's MALLOC_PERTURB_ (with the thread caches off, so that every free is
poisoned) fills freed memory with a pattern: a read after free then crashes
every time. These tests run every lazymlir-opt invocation of the lit suite,
and a compile of a column reduction through the native module, that way.
"""

import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POISON = {"MALLOC_PERTURB_": "165", "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}


def _lazymlir_opt() -> str:
    tool = os.path.join(os.path.dirname(sys.executable), "lazymlir-opt")
    if not os.access(tool, os.X_OK):
        tool = os.path.join(REPO, "build", "bin", "lazymlir-opt")
    if not os.access(tool, os.X_OK):
        pytest.skip("lazymlir-opt is not built: run `make`")
    return tool


def _lit_invocations():
    """(test file, lazymlir-opt arguments) of every lit RUN line."""
    for path in sorted(glob.glob(os.path.join(REPO, "test", "**", "*.mlir"), recursive=True)):
        with open(path) as f:
            for line in f:
                m = re.search(r"RUN:\s*(?:not\s+)?(lazymlir-opt\s.*)", line)
                if m:
                    args = shlex.split(m.group(1).split("|")[0].replace("%s", path))
                    yield path, [a for a in args[1:] if a != "2>&1"]


def test_lit_passes_do_not_read_freed_memory():
    tool = _lazymlir_opt()
    env = dict(os.environ, **POISON)
    runs, crashed = 0, []
    for path, args in _lit_invocations():
        r = subprocess.run(
            [tool, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300
        )
        runs += 1
        # A diagnostic is an exit status of 1; a crash is a signal.
        if r.returncode < 0 or r.returncode >= 128:
            frames = [line.strip() for line in r.stderr.splitlines() if "lazymlir" in line and "#" in line][:4]
            crashed.append(
                f"{os.path.relpath(path, REPO)} {' '.join(args)}: status {r.returncode}\n  " + "\n  ".join(frames)
            )
    assert runs > 50, f"found only {runs} lazymlir-opt RUN lines"
    assert not crashed, "crashed with freed memory poisoned:\n" + "\n".join(crashed)


_COLUMN_SUMS = r"""
import torch
from torch_mlir import fx
from lazymlir.execution import native

class ColumnSums(torch.nn.Module):  # a bias gradient: a column reduction
    def forward(self, x):
        return x.sum(0) * 2.0

x = torch.randn(64, 128)
text = str(fx.export_and_import(ColumnSums().eval(), x, output_type="linalg-on-tensors", func_name="main"))
exe = native.compile_linalg(text)
out = torch.empty(128)
exe.run([x], [out])
torch.testing.assert_close(out, x.sum(0) * 2.0, rtol=1e-5, atol=1e-4)
print("ok")
"""


def test_column_reduction_compiles_with_freed_memory_poisoned():
    pytest.importorskip("torch_mlir.fx")
    env = dict(os.environ, **POISON, LAZYMLIR_CACHE_DIR="")
    r = subprocess.run([sys.executable, "-c", _COLUMN_SUMS], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), f"status {r.returncode}\n{r.stderr[-3000:]}"
