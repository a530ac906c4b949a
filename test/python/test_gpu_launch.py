"""The GPU runtime that needs no compiler (lazymlir.gpu.launch) and its
bundles: launch plans from the native GPU compiler (no GPU needed), saved and
loaded with their version, chip and checksum checked. Running a plan needs a
CUDA device: those tests skip, saying so, where there is none."""

import json
import subprocess
import sys

import pytest
import torch

from lazymlir.gpu import launch
from lazymlir.gpu.launch import BundleError, GpuExecutable, can_run, load_bundle, save_bundle

HAVE_CUDA = torch.cuda.is_available()
NO_CUDA = "no CUDA device here (torch.cuda.is_available() is False): GPU execution is checked on a GPU machine"

ADD_EXP = """
func.func @main(%x: tensor<128x512xf32>, %y: tensor<512xf32>) -> tensor<128x512xf32> {
  %e = tensor.empty() : tensor<128x512xf32>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x, %y : tensor<128x512xf32>, tensor<512xf32>) outs(%e : tensor<128x512xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    %r = math.exp %s : f32
    linalg.yield %r : f32
  } -> tensor<128x512xf32>
  return %0 : tensor<128x512xf32>
}
"""


def compile_plan(source=ADD_EXP, chip="sm_90"):
    from lazymlir.execution import native

    return native.compile_gpu(source, chip)


def test_runtime_imports_with_torch_alone():
    # What a GPU machine without MLIR (another Python, another torch) has.
    code = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "lazymlir._native" or name.startswith(("torch_mlir", "mlir")):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
import lazymlir.gpu.launch
print("imported")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr[-3000:]


def test_plan_of_a_fused_kernel(native_built):
    plan = compile_plan()
    assert plan["format"] == "lazymlir-gpu-plan" and plan["version"] == 1
    assert [a["shape"] for a in plan["arguments"]] == [[128, 512], [512], [128, 512]]
    (launch,) = [s for s in plan["steps"] if s["op"] == "launch"]
    assert launch["block"] == [256, 1, 1] and launch["grid"] == [2, 128, 1]
    assert [a for a in launch["args"] if "buffer" in a] == [{"buffer": 0}, {"buffer": 1}, {"buffer": 2}]
    (module,) = plan["modules"].values()
    assert module["chip"] == "sm_90" and ".visible .entry" in module["ptx"] and ".extern" not in module["ptx"]


def test_compile_error_is_an_exception_not_an_abort(native_built):
    from lazymlir.execution import native

    with pytest.raises(native.CompileError, match="PTX 6.0 does not support sm_90"):
        native.compile_gpu(ADD_EXP, "sm_90", features="+ptx60")
    with pytest.raises(native.CompileError, match="unsupported chip 'sm_30'"):
        native.compile_gpu(ADD_EXP, "sm_30")


def test_bundle_round_trip_and_refusals(native_built, tmp_path):
    plan = compile_plan()
    path = str(tmp_path / "step.lzgpu")
    save_bundle(path, {"g0": plan}, "sm_90", producer="test")
    graphs = load_bundle(path, device_chip="sm_90")
    assert list(graphs) == ["g0"] and graphs["g0"].plan == plan
    assert load_bundle(path, device_chip="sm_100")["g0"].chips == ["sm_90"]  # PTX runs on newer chips

    with pytest.raises(BundleError, match="compiled for sm_90; this device is sm_80"):
        load_bundle(path, device_chip="sm_80")
    bundle = json.load(open(path))
    tampered = dict(bundle, graphs={"g0": dict(plan, steps=plan["steps"] * 2)})
    json.dump(tampered, open(tmp_path / "bad.lzgpu", "w"))
    with pytest.raises(BundleError, match="corrupted"):
        load_bundle(str(tmp_path / "bad.lzgpu"), device_chip="sm_90")
    json.dump(dict(bundle, version=2), open(tmp_path / "v2.lzgpu", "w"))
    with pytest.raises(BundleError, match="bundle version 2"):
        load_bundle(str(tmp_path / "v2.lzgpu"), device_chip="sm_90")
    (tmp_path / "junk.lzgpu").write_text("not json")
    with pytest.raises(BundleError, match="not a readable bundle"):
        load_bundle(str(tmp_path / "junk.lzgpu"))
    with pytest.raises(BundleError, match="compiled for \\['sm_90'\\], the bundle is for sm_80"):
        save_bundle(str(tmp_path / "mixed.lzgpu"), {"g0": plan}, "sm_80")


def test_plan_checks():
    with pytest.raises(BundleError, match="not a lazymlir-gpu-plan"):
        GpuExecutable({"format": "something"})
    with pytest.raises(BundleError, match="version 7"):
        GpuExecutable({"format": "lazymlir-gpu-plan", "version": 7})
    with pytest.raises(BundleError, match="module nope, which the plan lacks"):
        GpuExecutable(
            {
                "format": "lazymlir-gpu-plan",
                "version": 1,
                "arguments": [],
                "modules": {},
                "steps": [{"op": "launch", "module": "nope"}],
            }
        )
    assert can_run("sm_80", "sm_90") and not can_run("sm_90", "sm_80")
    launch.check_chips(["sm_80"], "sm_90")
    with pytest.raises(BundleError, match="compiled for sm_90; this device is sm_86"):
        launch.check_chips(["sm_90"], "sm_86")
    assert can_run("sm_90a", "sm_90a") and not can_run("sm_90a", "sm_100")


@pytest.mark.skipif(HAVE_CUDA, reason="checks the error on a machine without CUDA")
def test_running_without_cuda_says_so(native_built):
    executable = GpuExecutable(compile_plan())
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        executable.run([torch.randn(128, 512), torch.randn(512), torch.empty(128, 512)])


@pytest.mark.skipif(not HAVE_CUDA, reason=NO_CUDA)
def test_plan_runs_like_eager_cuda(native_built):
    major, minor = torch.cuda.get_device_capability()
    executable = GpuExecutable(compile_plan(chip=launch.chip_of_capability(major, minor)))
    x, y = torch.randn(128, 512, device="cuda"), torch.randn(512, device="cuda")
    out = torch.empty(128, 512, device="cuda")
    executable.run([x, y, out])
    torch.testing.assert_close(out, torch.exp(x + y))
