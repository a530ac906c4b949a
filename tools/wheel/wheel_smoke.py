"""What the installed wheel must do where no MLIR/LLVM is installed (run by
tools/wheel/check_wheel.py, inside its mount namespace, with the check
venv's Python in isolated mode so that nothing of the source tree is
imported). Prints one JSON line of measurements; exits non-zero on any
failure.

1. The hiding works: /usr/lib/llvm-22 is empty and Debian's libMLIR and
   libLLVM cannot be loaded (without this the rest proves nothing).
2. lazymlir is the installed wheel's, with its native compiler.
3. ldd of every ELF file of the wheel resolves, to glibc's libraries (and
   torch's, for _device) only.
4. lazymlir-opt --help runs.
5. The MNIST CNN (examples/mnist.py's network and step) trains on the lazy
   device, compiled: its eval-mode output equals eager's, the loss of a
   repeated batch falls, no op ran eagerly (no aten:: counter).
6. torch.compile(backend="lazymlir") runs a small MLP's forward and
   backward compiled, equal to eager.
"""

import ctypes
import json
import os
import subprocess
import sys
import sysconfig
import time

START = float(os.environ["WHEEL_CHECK_START"])  # when pip install began
GLIBC_LIBS = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "ld-linux-x86-64.so.2"}
TORCH_LIBS = {"libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so"}
report = {}


def check(condition, message):
    if not condition:
        raise SystemExit(f"wheel check: {message}")


def hidden():
    check(os.listdir("/usr/lib/llvm-22") == [] if os.path.isdir("/usr/lib/llvm-22") else True, "llvm-22 visible")
    for name in ("libMLIR.so.22.1", "libLLVM.so.22.1", "/usr/lib/llvm-22/lib/libMLIR.so.22.1"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        raise SystemExit(f"wheel check: {name} still loads: the namespace hides nothing")


def ldd(path):
    out = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
    libs = {}
    for line in out.splitlines():
        parts = line.split()
        if not parts or parts[0].startswith("linux-vdso"):
            continue
        name = os.path.basename(parts[0])
        check("not found" not in line, f"ldd {path}: {line.strip()}")
        libs[name] = parts[2] if len(parts) > 2 and parts[1] == "=>" else parts[0]
    return libs


def native_libraries(package, script):
    """ldd lists a library's whole closure: _device's holds torch's libraries
    and what they need themselves (libstdc++, libgomp, ...), which is the torch
    wheel's business; anything else, or anything beyond glibc in _native and
    lazymlir-opt, fails. (build_wheel.py checked each binary's own needs.)"""
    import torch

    torch_lib = os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "lib"))
    torch_closure = set(TORCH_LIBS)
    for name in TORCH_LIBS:
        torch_closure |= set(ldd(os.path.join(torch_lib, name)))
    files = [os.path.join(package, f) for f in sorted(os.listdir(package)) if f.endswith(".so")] + [script]
    check(len(files) == 3, f"expected _native, _device and lazymlir-opt, found {files}")
    report["ldd"] = {}
    for path in files:
        libs = ldd(path)
        report["ldd"][os.path.basename(path)] = sorted(libs)
        for name, where in libs.items():
            if name in GLIBC_LIBS:
                continue
            device = os.path.basename(path).startswith("_device")
            check(device and name in torch_closure, f"{path} needs {name} ({where})")
            if name in TORCH_LIBS:
                check(os.path.realpath(where).startswith(torch_lib), f"{path}: {name} is not torch's ({where})")


def mnist():
    import copy

    import torch

    import lazymlir
    from lazymlir import metrics
    from lazymlir.execution import entries
    from lazymlir.testing import MnistNet, train_step

    check(entries.native_compiler() is not None, f"no native compiler: {entries._compiler_import_error!r}")
    torch.manual_seed(0)
    ref = MnistNet()
    model = copy.deepcopy(ref).to("lazy")
    x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    metrics.reset()
    losses = []
    for step in range(6):
        losses.append(float(train_step(model, opt, x, y, "lazy").item()))
        if step == 0:
            report["seconds_install_to_first_step"] = round(time.time() - START, 1)
    check(losses[-1] < losses[0], f"the loss of a repeated batch did not fall: {losses}")
    compiled = metrics.counter_value("UncachedCompile") + metrics.counter_value("CachedCompile")
    check(compiled > 0, "nothing compiled:\n" + metrics.metrics_report())
    eager_ops = [n for n in metrics.counter_names() if n.startswith("aten::")]
    check(not eager_ops and metrics.counter_value("CompileFallback") == 0, "ran eagerly:\n" + metrics.metrics_report())
    # The compiled forward against eager's, same weights (dropout off).
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ref.eval(), model.eval()
    with torch.no_grad():
        probe = torch.randn(4, 1, 28, 28)
        out = model(probe.to("lazy"))
        lazymlir.mark_step()
        torch.testing.assert_close(out.cpu(), ref(probe), rtol=1e-4, atol=1e-5)
    report["mnist_losses"] = [round(v, 4) for v in losses]
    report["mnist_compiles"] = compiled


def dynamo():
    import torch

    from lazymlir import metrics

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    expected = model(x)
    expected.sum().backward()
    expected_grad = model[0].weight.grad.clone()
    model.zero_grad()
    metrics.reset()
    out = torch.compile(model, backend="lazymlir")(x)
    out.sum().backward()
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model[0].weight.grad, expected_grad, rtol=1e-5, atol=1e-6)
    check(metrics.counter_value("DynamoRegion") > 0, "torch.compile compiled no region:\n" + metrics.metrics_report())
    check(metrics.counter_value("DynamoEagerOp") == 0, "torch.compile ran ops eagerly:\n" + metrics.metrics_report())
    report["dynamo_regions"] = metrics.counter_value("DynamoRegion")


def main():
    hidden()
    import lazymlir

    package = os.path.dirname(lazymlir.__file__)
    check(package.startswith(sysconfig.get_paths()["purelib"]), f"lazymlir imported from {package}")
    script = os.path.join(sysconfig.get_paths()["scripts"], "lazymlir-opt")
    native_libraries(package, script)
    help_text = subprocess.run([script, "--help"], capture_output=True, text=True, check=True).stdout
    check("lazymlir" in help_text and "--lazymlir-" in help_text, "lazymlir-opt --help:\n" + help_text[:2000])
    mnist()
    dynamo()
    print(json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
