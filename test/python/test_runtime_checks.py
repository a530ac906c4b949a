"""Compiled code never reads or writes outside its buffers and never aborts:
indices out of range and integer division by zero set a check flag
(lazymlir-guard-runtime-checks), the run raises CheckFailed, and the lazy
runtime reruns the graph eagerly, so the user sees eager's own exception at
the barrier (or eager's values when eager does not raise).

Every case is compared with eager PyTorch. The cases that aborted the process
(cf.assert), trapped (idiv) or read foreign memory before the guard run in a
child process: a regression fails these tests instead of killing pytest."""

import functools
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_compiled

import lazymlir
from lazymlir import metrics

INT64_MIN = -(2**63)


def _emb_backward(idx, w):
    """Embedding forward and backward; the gradient of the table."""
    table = w.detach().clone().requires_grad_()
    (F.embedding(idx, table) * 2).sum().backward()
    return table.grad


def _setitem(t, idx, src):
    t = t.clone()
    t[idx] = src
    return t


# name -> (function of the arguments, arguments on CPU). Tables are small so
# that every index family and edge is cheap; compiled graphs are shared by
# cases of one shape.
def _w(rows=3, cols=4):
    return torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols) + 0.5


_INDEX_FAMILIES = {
    "embedding": (lambda i, w: F.embedding(i, w) + 1, lambda i: (torch.tensor(i), _w())),
    "embedding_backward": (_emb_backward, lambda i: (torch.tensor(i), _w())),
    "gather": (lambda i, w: torch.gather(w, 1, i) * 2, lambda i: (torch.tensor([i] * 3), _w())),
    "index_select0": (lambda i, w: torch.index_select(w, 0, i) - 1, lambda i: (torch.tensor(i), _w())),
    "index_select1": (lambda i, w: torch.index_select(w, 1, i) - 1, lambda i: (torch.tensor(i), _w(3, 3))),
    "index": (lambda i, w: w[i] * 3, lambda i: (torch.tensor(i), _w())),
    "index2d": (lambda i, w: w[i, i] + 2, lambda i: (torch.tensor(i), _w(3, 3))),
    "take": (lambda i, w: torch.take(w, i) + 1, lambda i: (torch.tensor(i), _w())),
    "index_put": (lambda i, w, s: w.index_put((i,), s), lambda i: (torch.tensor(i), _w(), torch.ones(len(i), 4))),
    "index_put_accumulate": (
        lambda i, w, s: w.index_put((i,), s, accumulate=True),
        lambda i: (torch.tensor(i), _w(), torch.ones(len(i), 4)),
    ),
    "setitem": (lambda i, w, s: _setitem(w, i, s), lambda i: (torch.tensor(i), _w(), torch.ones(len(i), 4))),
    "scatter": (
        lambda i, w, s: w.scatter(0, i, s),
        lambda i: (torch.tensor([i] * 2).T.contiguous(), _w(), torch.ones(len(i), 2)),
    ),
    "scatter_add": (
        lambda i, w, s: w.scatter_add(0, i, s),
        lambda i: (torch.tensor([i] * 2).T.contiguous(), _w(), torch.ones(len(i), 2)),
    ),
}

# index lists per kind; the tables have 3 rows (and 3 or 4 columns; take: 12
# elements, so its out-of-range indices are scaled).
_INDICES = {
    "in_range": [0, 2, 1],
    "negative_valid": [-1, 0, -3],
    "negative_invalid": [0, -9, 1],
    "past_end": [1, 3, 0],
    "far_past_end": [0, 1, 1 << 40],
}
_TAKE_INDICES = {
    "in_range": [0, 11, 5],
    "negative_valid": [-1, 0, -12],
    "negative_invalid": [0, -13, 1],
    "past_end": [1, 12, 0],
    "far_past_end": [0, 1, 1 << 40],
}


def _division_case(op, dtype):
    a = torch.tensor([7, -7, 5, 3, 0, 9], dtype=dtype)
    b = torch.tensor([2, 2, 0, -1, 0, -4], dtype=dtype)
    return op, (a, b)


_DIVISION_OPS = {
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "floordiv": lambda a, b: a // b,
    "mod": lambda a, b: a % b,
    "remainder": lambda a, b: torch.remainder(a, b),
    "fmod": lambda a, b: torch.fmod(a, b),
    "scalar_mod_zero": lambda a, b: a % 0 + b,
    "scalar_floordiv_zero": lambda a, b: a // 0 + b,
    "scalar_floordiv": lambda a, b: a // 3 + b,
}


def _division_cases():
    cases = {}
    for name, op in _DIVISION_OPS.items():
        for dtype in (torch.int64, torch.int32):
            suffix = "" if dtype == torch.int64 else "_i32"
            cases[f"{name}{suffix}/zero"] = _division_case(op, dtype)
            # the same graph without a zero divisor
            cases[f"{name}{suffix}/nonzero"] = (
                op,
                tuple(torch.where(t == 0, 5, t) if k else t for k, t in enumerate(_division_case(op, dtype)[1])),
            )
    return cases


def _all_cases():
    cases = {}
    for family, (fn, make) in _INDEX_FAMILIES.items():
        for kind in _INDICES:
            indices = (_TAKE_INDICES if family == "take" else _INDICES)[kind]
            cases[f"{family}/{kind}"] = (fn, make(indices))
    cases.update(_division_cases())
    return cases


CASES = _all_cases()


def _eager(fn, args):
    """("ok", values) or ("error", type name, message)."""
    try:
        return ("ok", fn(*[a.clone() for a in args]).tolist())
    except Exception as e:  # noqa: BLE001 - eager's error is the reference
        return ("error", type(e).__name__, str(e))


def _run_case(fn, args):
    """Eager and lazy outcomes: ("ok", values) or ("error", type, message);
    for lazy, ("raised while tracing", ...) when it raised before the barrier."""
    expected = _eager(fn, args)
    lazy_args = [a.to("lazy") for a in args]
    try:
        out = fn(*lazy_args)
    except Exception as e:  # noqa: BLE001
        return expected, ("raised while tracing", type(e).__name__, str(e))
    try:
        got = ("ok", out.cpu().tolist())
    except Exception as e:  # noqa: BLE001
        got = ("error", type(e).__name__, str(e))
    return expected, got


def _settle():
    """Let every submitted graph finish (and drop errors nobody read), so
    that the next case's metrics are its own."""
    try:
        lazymlir.mark_step()
        lazymlir.wait_device_ops()
    except Exception:  # noqa: BLE001
        pass


# Which cases eager accepts: those must give eager's values with no check
# failure; the others eager's exception.
EAGER_OK = {name for name, (fn, args) in CASES.items() if _eager(fn, args)[0] == "ok"}


def _child_main(names):
    """In the child: every named case, then proof that the process still
    works and the cache entry still checks. One JSON object on stdout."""
    results = {"lazymlir": lazymlir.__file__}
    for name in names:
        _settle()
        metrics.reset()
        expected, got = _run_case(*CASES[name])
        _settle()
        results[name] = {
            "expected": expected,
            "got": got,
            "reruns": metrics.counter_value("RuntimeCheckEagerRerun"),
            "compiled": metrics.counter_value("UncachedCompile") + metrics.counter_value("CachedCompile"),
        }
    # A later graph runs; the failing graph's cache entry is reused (a hit)
    # with good indices, then with bad ones again (and still checks).
    _settle()
    metrics.reset()
    w = _w()
    later = ((w.to("lazy") * 2).sum()).item()
    # the graph of the embedding cases (which failed its checks there)
    embed = CASES["embedding/past_end"][0]
    good = embed(torch.tensor([2, 0, 1]).to("lazy"), w.to("lazy")).cpu().tolist()
    try:
        embed(torch.tensor([2, 7, 0]).to("lazy"), w.to("lazy")).cpu()
        again = None
    except IndexError as e:
        again = str(e)
    hits = metrics.counter_value("CachedCompile")
    misses = metrics.counter_value("UncachedCompile")
    results["after"] = {
        "later": later,
        "later_expected": (w * 2).sum().item(),
        "good": good,
        "good_expected": embed(torch.tensor([2, 0, 1]), w).tolist(),
        "hits": hits,
        "misses": misses,
        "again": again,
        "reruns": metrics.counter_value("RuntimeCheckEagerRerun"),
    }
    # Other barriers: .item(), and mark_step() then a read (the error is the
    # job's, raised by the read that needs it).
    _settle()
    barriers = {}
    try:
        F.embedding(torch.tensor([0, 5]).to("lazy"), w.to("lazy")).sum().item()
    except IndexError as e:
        barriers["item"] = str(e)
    gathered = torch.gather(w.to("lazy"), 1, torch.tensor([[0], [4], [1]]).to("lazy"))
    lazymlir.mark_step()  # runs on the worker; nothing raised here
    barriers["mark_step"] = "no error"
    try:
        gathered.cpu()
    except RuntimeError as e:
        barriers["read_after_mark_step"] = [type(e).__name__, str(e)]
    results["barriers"] = barriers
    # INT64_MIN / -1 must not trap: the wrapped result, no check failure.
    _settle()
    metrics.reset()
    a = torch.tensor([INT64_MIN, 6])
    b = torch.tensor([-1, -1])
    results["int_min"] = {
        "trunc": torch.div(a.to("lazy"), b.to("lazy"), rounding_mode="trunc").cpu().tolist(),
        "fmod": torch.fmod(a.to("lazy"), b.to("lazy")).cpu().tolist(),
        "reruns": metrics.counter_value("RuntimeCheckEagerRerun"),
    }
    print("RESULTS " + json.dumps(results))


@pytest.fixture(scope="module")
def child_results():
    """Runs every case in one child process (same interpreter flags and
    lazymlir package as this one)."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = "import sys; sys.path.insert(0, %r); import test_runtime_checks as t; t._child_main(sys.argv[1:])" % here
    command = [sys.executable] + (["-S"] if sys.flags.no_site else []) + ["-c", code] + list(CASES)
    env = dict(os.environ, LAZYMLIR_ASYNC="1")
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    info = (
        f"child exited with {proc.returncode}; stdout tail:\n{proc.stdout[-1500:]}\nstderr tail:\n{proc.stderr[-3000:]}"
    )
    return (json.loads(lines[-1][len("RESULTS ") :]) if lines else None), info


def _result(child_results, name):
    results, info = child_results
    assert results is not None, info
    assert results["lazymlir"] == lazymlir.__file__, "the child imported another lazymlir"
    assert name in results, info
    return results[name]


@pytest.mark.parametrize("name", [n for n in CASES if n not in EAGER_OK])
def test_bad_index_or_divisor_raises_eagers_error(native_built, child_results, name):
    """Eager's exception type and message, at the barrier (.cpu()), from the
    compiled graph's check and the eager rerun."""
    r = _result(child_results, name)
    assert r["got"] == r["expected"]
    assert r["compiled"] > 0 and r["reruns"] >= 1, r  # the compiled check fired


@pytest.mark.parametrize("name", sorted(EAGER_OK))
def test_good_index_or_divisor_in_child(native_built, child_results, name):
    r = _result(child_results, name)
    assert r["got"] == r["expected"]
    assert r["reruns"] == 0, r  # no needless check failure


@pytest.mark.parametrize("name", sorted(EAGER_OK))
def test_good_index_or_divisor_compiled(native_built, fresh_cache, name):
    """In this process: eager's values, compiled (not run eagerly), no rerun."""
    fn, args = CASES[name]
    expected, got = _run_case(fn, args)
    lazymlir.wait_device_ops()
    assert got == expected
    assert metrics.counter_value("UncachedCompile") >= 1
    assert_compiled()
    assert metrics.counter_value("RuntimeCheckEagerRerun") == 0


def test_process_keeps_working_and_cache_entry_still_checks(native_built, child_results):
    r = _result(child_results, "after")
    assert r["later"] == r["later_expected"]
    assert r["good"] == r["good_expected"]
    # the graph that failed earlier, reused twice (the sum is new)
    assert (r["hits"], r["misses"]) == (2, 1)
    assert r["again"] == "index out of range in self"
    assert r["reruns"] == 1


def test_error_at_item_and_at_read_after_mark_step(native_built, child_results):
    r = _result(child_results, "barriers")
    assert r == {
        "item": "index out of range in self",
        "mark_step": "no error",
        "read_after_mark_step": ["RuntimeError", "index 4 is out of bounds for dimension 1 with size 4"],
    }


def test_int_min_by_minus_one_wraps(native_built, child_results):
    r = _result(child_results, "int_min")
    assert r["trunc"] == [INT64_MIN, -6]  # two's complement, as C's wrap; no trap
    assert r["fmod"] == [0, 0]
    assert r["reruns"] == 0


def test_check_failed_is_exported(native_built):
    from lazymlir.execution import native

    assert issubclass(native.CheckFailed, RuntimeError)
    assert native.CheckFailed is lazymlir._native.CheckFailed


def test_executable_raises_check_failed_and_resets(native_built):
    """The native boundary: CheckFailed after the run, the flag reset (the
    next good run succeeds), on both run paths; no checks, no flag."""
    from lazymlir.execution import native

    text = """
#map = affine_map<(d0, d1) -> (d0)>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%arg0: tensor<3x4xf32>, %arg1: tensor<2xi64>) -> tensor<2x4xf32> {
  %0 = tensor.empty() : tensor<2x4xf32>
  %1 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel"]}
      ins(%arg1 : tensor<2xi64>) outs(%0 : tensor<2x4xf32>) {
  ^bb0(%in: i64, %out: f32):
    %r = arith.index_cast %in : i64 to index
    %c = linalg.index 1 : index
    %v = tensor.extract %arg0[%r, %c] : tensor<3x4xf32>
    linalg.yield %v : f32
  } -> tensor<2x4xf32>
  return %1 : tensor<2x4xf32>
}"""
    exe = native.compile_linalg(text)
    assert exe.has_runtime_checks
    w = _w()
    out = torch.empty(2, 4)
    for run in (exe.run, functools.partial(native.run_allocated, exe)):
        run([w, torch.tensor([2, 0])], [out])
        torch.testing.assert_close(out, w[[2, 0]])
        for bad in ([3, 0], [0, -1], [1 << 62, 1]):
            with pytest.raises(native.CheckFailed, match="index out of range or integer division by zero"):
                run([w, torch.tensor(bad)], [out])
        run([w, torch.tensor([1, 1])], [out])  # reset: no stale failure
        torch.testing.assert_close(out, w[[1, 1]])
    plain = native.compile_linalg(
        text.replace("%r = arith.index_cast %in : i64 to index", "%r = linalg.index 0 : index")
    )
    assert not plain.has_runtime_checks
