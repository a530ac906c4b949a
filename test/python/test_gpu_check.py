"""The GPU check on a machine without a GPU: `tools/gpu_bundles.py` builds and
verifies its bundles (ptxas assembles every kernel), `tools/gpu_check.py`
refuses to run without a CUDA device with a clear message and exit status 2,
and the directory's round trip holds: inputs regenerate bit for bit from
their recipes, the graphs' own aten code run eagerly matches the references,
and a wrong value or a corrupted file is caught."""

import functools
import json
import os
import subprocess
import sys

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(REPO, "tools")
sys.path.insert(0, TOOLS)
import gpu_check  # noqa: E402


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-bundles")
    done = subprocess.run(
        [sys.executable, os.path.join(TOOLS, "gpu_bundles.py"), str(out), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "assembled by ptxas" in done.stdout
    return out


def test_bundles_hold_every_case_for_both_chips(native_built, bundles):
    manifest = gpu_check.verify(str(bundles))
    assert [c["name"] for c in manifest["cases"]] == ["chain", "matmul_128", "mnist_train"]
    for case in manifest["cases"]:
        assert sorted(case["bundles"]) == ["sm_80", "sm_90"]
        for graph in case["graphs"]:
            assert graph["inputs"] and graph["outputs"] and "def forward" in graph["fx"]
    # Big float inputs travel as recipes, not bytes: the MNIST step's weights.
    mnist = manifest["cases"][2]["graphs"][0]["inputs"]
    assert sum("recipe" in i for i in mnist) >= 9


def test_the_check_needs_a_gpu_and_says_so(bundles):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(
        [sys.executable, os.path.join(TOOLS, "gpu_check.py"), str(bundles)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no CUDA device" in done.stderr and "verified (3 cases)" in done.stderr


def test_the_check_imports_only_the_gpu_launcher():
    # What the GPU machine has: torch and this file, no lazymlir package.
    code = (
        "import sys; sys.path.insert(0, %r); import gpu_check; rt = gpu_check.load_launch(); "
        "import torch, torch._dynamo; print(rt.BUNDLE_FORMAT, sorted(m for m, v in sys.modules.items() "
        "if v is not None and m.startswith(('lazymlir', 'torch_mlir'))))" % TOOLS
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["lazymlir-gpu-bundle", "[]"]  # loaded from its file, nothing else


def test_references_round_trip_and_catch_wrong_values(native_built, bundles):
    data = gpu_check.Data(os.path.join(bundles, "data.bin"))
    manifest = gpu_check.verify(str(bundles))
    for case in manifest["cases"]:
        for graph in case["graphs"]:
            inputs = [gpu_check.make_input(torch, spec, data) for spec in graph["inputs"]]
            fn = functools.partial(gpu_check.fx_function(torch, graph["fx"], torch.device("cpu")), None)
            with torch.no_grad():
                outs = fn(*inputs)
            verdicts = [gpu_check.compare(torch, o, s, data) for o, s in zip(outs, graph["outputs"])]
            assert all(v["ok"] for v in verdicts), (case["name"], [v["why"] for v in verdicts])
            floats = [i for i, o in enumerate(outs) if o.is_floating_point() and o.numel() > 1]
            wrong = outs[floats[0]].clone()
            wrong.view(-1)[wrong.numel() // 2 :] *= 1.01  # a 1% error in half the elements
            assert not gpu_check.compare(torch, wrong, graph["outputs"][floats[0]], data)["ok"]


def test_corruption_is_refused(native_built, bundles, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in os.listdir(bundles):
        (copy / f).write_bytes((bundles / f).read_bytes())
    raw = bytearray((copy / "data.bin").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (copy / "data.bin").write_bytes(bytes(raw))
    with pytest.raises(SystemExit, match="data.bin does not match"):
        gpu_check.verify(str(copy))
    manifest = json.loads((bundles / "manifest.json").read_text())
    spec = dict(manifest["cases"][0]["graphs"][0]["inputs"][0])
    spec["recipe"] = dict(spec["recipe"], seed=spec["recipe"]["seed"] + 1)
    with pytest.raises(ValueError, match="recipe gives other bits"):
        gpu_check.make_input(torch, spec, gpu_check.Data(str(bundles / "data.bin")))
