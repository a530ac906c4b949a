"""make wheel-check: the wheel in dist/ installed and run where no MLIR or
LLVM is (docs/NOTES.md, section 17).

1. A fresh venv (build/wheel-check/venv) gets the wheel and only its
   declared dependencies (pip resolves them: torch, torch-mlir, numpy).
2. A mount namespace (`unshare -m` as root, `unshare -rm` otherwise) hides
   every LLVM/MLIR library of the system: an empty tmpfs over each
   /usr/lib/llvm-*, /dev/null over each libLLVM*/libMLIR*/libmlir_* file
   under /usr, /lib* and /opt. torch-mlir's own copies, in the venv, stay:
   they are a declared dependency.
3. There, tools/wheel/wheel_smoke.py runs with the venv's Python in
   isolated mode from an empty directory: ldd of the wheel's binaries,
   lazymlir-opt --help, the MNIST CNN trained compiled, torch.compile.
4. Then pytest joins the venv (it is no dependency of the wheel, so only
   after step 3) and WHEEL_TESTS, tests of the source tree, run against the
   installed wheel in a second namespace like the first: the compiler's own
   tests, errors raised through _device and through compiled steps,
   training against eager, the eager fallbacks.

Prints the wheel's size, pip install's time and the time from the start of
pip install to the first trained step (an empty compile cache).
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = ("libLLVM*.so*", "libMLIR*.so*", "libmlir_*.so*")
WHEEL_TESTS = [
    "test_native.py",
    "test_devices.py",
    "test_failed_steps.py",
    "test_train_models.py",
    "test_lazy_fallback.py",
]
# Runs WHEEL_TESTS with the installed lazymlir, imported before pytest
# imports anything from the source tree.
PYTEST = """
import os, sys, sysconfig, lazymlir, pytest
assert lazymlir.__file__.startswith(sysconfig.get_paths()["purelib"]), lazymlir.__file__
print("pytest against", os.path.dirname(lazymlir.__file__), flush=True)
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-m", "not slow", *sys.argv[1:]]))
"""


def hide_llvm():
    """Inside the namespace: nothing of the system's LLVM/MLIR stays visible."""
    hidden = []
    for directory in sorted(glob.glob("/usr/lib/llvm-*")) + sorted(glob.glob("/usr/local/lib/llvm-*")):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=4k", "tmpfs", directory], check=True)
        hidden.append(directory)
    roots = [r for r in ("/usr", "/lib", "/lib64", "/opt") if os.path.isdir(r) and not os.path.islink(r)]
    found = subprocess.run(
        ["find", *roots, "-xdev", "-type", "f", "(", *sum([["-name", p, "-o"] for p in PATTERNS], [])[:-1], ")"],
        capture_output=True,
        text=True,
    ).stdout.split()
    for path in found:
        subprocess.run(["mount", "--bind", "/dev/null", path], check=True)
        hidden.append(path)
    return hidden


def inside(args):
    hidden = hide_llvm()
    print(f"hidden: {len(hidden)} paths ({', '.join(hidden[:4])}, ...)", flush=True)
    venv_python = Path(args.venv) / "bin" / "python"
    with tempfile.TemporaryDirectory(prefix="lazymlir-wheel-check-") as work:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "LAZYMLIR_", "LD_"))}
        env["LAZYMLIR_CACHE_DIR"] = os.path.join(work, "cache")  # an empty compile cache
        env["WHEEL_CHECK_START"] = args.start
        env["PATH"] = f"{Path(args.venv) / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        if args.pytest:
            tests = ROOT / "test" / "python"
            cmd = [venv_python, "-c", PYTEST, *WHEEL_TESTS]
            return subprocess.run(cmd, cwd=tests, env=env).returncode
        smoke = shutil.copy(Path(__file__).parent / "wheel_smoke.py", work)
        result = subprocess.run([venv_python, "-I", smoke], cwd=work, env=env, capture_output=True, text=True)
    sys.stderr.write(result.stderr[-6000:])
    sys.stdout.write(result.stdout)
    return result.returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dist", default=str(ROOT / "dist"))
    parser.add_argument("--work", default=str(ROOT / "build" / "wheel-check"))
    parser.add_argument("--python", default=sys.executable, help="the Python the venv is made from")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--venv", help=argparse.SUPPRESS)
    parser.add_argument("--start", help=argparse.SUPPRESS)
    parser.add_argument("--pytest", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        return inside(args)

    wheels = sorted(Path(args.dist).glob("lazymlir-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"wheel check: expected one wheel in {args.dist}, found {[w.name for w in wheels]}")
    wheel = wheels[0]
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    venv = work / "venv"
    # The venv is made from the base interpreter: a venv's python would carry its own packages' paths.
    base = subprocess.run(
        [args.python, "-c", "import sys; print(sys._base_executable)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    subprocess.run([base, "-m", "venv", venv], check=True)
    start = time.time()
    pip = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-cache-dir", wheel],
        capture_output=True,
        text=True,
    )
    installed = time.time()
    if pip.returncode:
        sys.stderr.write(pip.stdout[-3000:] + pip.stderr[-3000:])
        raise SystemExit("wheel check: pip install failed")
    freeze = subprocess.run([venv / "bin" / "python", "-m", "pip", "freeze"], capture_output=True, text=True).stdout
    print(f"{wheel.name}: {wheel.stat().st_size / 2**20:.1f} MiB; pip install {installed - start:.0f} s; venv has:")
    print("  " + " ".join(freeze.split()))

    unshare = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    cmd = [*unshare, sys.executable, __file__, "--inside", "--venv", str(venv), "--start", repr(start)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    sys.stderr.write(result.stderr[-8000:])
    lines = result.stdout.strip().splitlines()
    print("\n".join(lines[:-1]))
    if result.returncode:
        print(lines[-1] if lines else "")
        raise SystemExit(f"wheel check: failed (exit {result.returncode})")
    report = json.loads(lines[-1])
    for name, libs in report.pop("ldd").items():
        print(f"ldd {name}: {' '.join(libs)}")
    print(json.dumps(report))

    pip = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "-q", "pytest"], capture_output=True, text=True
    )
    if pip.returncode:
        sys.stderr.write(pip.stdout[-3000:] + pip.stderr[-3000:])
        raise SystemExit("wheel check: pip install pytest failed")
    tests_start = time.time()
    if subprocess.run([*cmd, "--pytest"]).returncode:
        raise SystemExit("wheel check: the tests failed against the installed wheel")
    print(
        f"wheel check passed: {wheel.stat().st_size / 2**20:.1f} MiB, pip install {installed - start:.0f} s, "
        f"first trained step {report['seconds_install_to_first_step']:.0f} s after pip install began; "
        f"{len(WHEEL_TESTS)} test files against the wheel {time.time() - tests_start:.0f} s"
    )


if __name__ == "__main__":
    sys.exit(main())
