"""Issue 47: ``tools/stress.py --short`` (``make stress STRESS_ARGS=--short``),
the short processes of test_compile_cache's two-at-once test: a small MLP
trained for 4 Adam steps on the CPU and on the lazy device, ``float(loss)``
after each mark_step, two processes at a time on one empty cache directory.
Each process checks its lazy losses and parameters against the CPU's and that
its graphs compiled (no fallback, no eager graph); the stress tool fails on
any process that exits non-zero or dies by a signal (an abort at exit among
them) and reports it with every thread's backtrace from its core. A small
count here keeps the mode working; the abort it hunts needs hundreds."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_short_stress_processes_pass(native_built, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAZYMLIR_")}
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "tools", "stress.py"),
            "--short",
            "--processes",
            "2",
            "--keep",
            str(tmp_path / "kept"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "stress: 2 processes (short" in out.stdout and "failed: 0" in out.stdout, out.stdout
    assert not (tmp_path / "kept").exists()  # nothing failed, nothing kept
