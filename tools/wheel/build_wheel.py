"""The self-contained wheel (``make wheel``; docs/NOTES.md, section 17).

Relinks the developer build's objects (``build/``, made by ``make build``)
into binaries that need nothing but glibc, packs them with the Python
package, and has ``auditwheel repair`` check and tag the wheel:
``dist/lazymlir-<version>-cp311-cp311-manylinux_2_28_x86_64.whl``.

- ``lazymlir/_native*.so`` and ``lazymlir-opt``: our archives, then Debian's
  static MLIR/LLVM archives (``/usr/lib/llvm-22/lib/*.a``; the linker takes
  only the members something references, ``--gc-sections`` drops unused
  functions), zlib and zstd, and GCC's ``libstdc++.a``/``libgcc_eh.a``.
  A version script exports ``PyInit__native`` alone: every LLVM, MLIR and
  libstdc++ symbol is local, so torch-mlir's own LLVM in the same process
  cannot bind to ours or ours to it.
- ``lazymlir/_device*.so``: the lazy device's objects, linked against the
  torch wheel's libraries (``libc10.so``, ``libtorch*.so``, found through
  ``$ORIGIN/../torch/lib``) and the libstdc++/libgcc_s that torch loads
  (its C++ objects and exceptions cross into libtorch: one C++ runtime in
  the process; ``shared_runtime``).

All three are linked by zig's clang driver (PyPI ``ziglang``) for
``x86_64-linux-gnu.2.28``: the symbol versions are those of glibc 2.28's
stubs, whatever glibc compiled the archives. The four symbols the archives
use that 2.28 lacks come from ``glibc_compat.c``; ``memrefCopy`` (Debian has
``libmlir_c_runner_utils`` only as a shared library) from ``memref_copy.c``.

The link commands are CMake's own (``ninja -t commands``), with the
compiler driver, the shared MLIR/LLVM libraries and the run paths replaced,
so a source added to a CMake target is in the wheel without editing this.
Each binary is then checked (``check_binary``): what it needs
(``DT_NEEDED``), the newest glibc symbol version it references, and what it
exports; any surprise fails the build, as does a ``compat_test`` of the
shims that fails.
"""

import argparse
import base64
import csv
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GLIBC = "2.28"
PLATFORM = "manylinux_2_28_x86_64"
LLVM_LIB = Path("/usr/lib/llvm-22/lib")
SYSTEM_LIB = Path("/usr/lib/x86_64-linux-gnu")
# glibc's own libraries: all a binary of the wheel may need (plus torch's for _device).
GLIBC_LIBS = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "ld-linux-x86-64.so.2"}
TORCH_LIBS = {"libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so"}
# GCC's C++ runtime as torch itself loads it (manylinux's allowed libraries).
CXX_RUNTIME = {"libstdc++.so.6", "libgcc_s.so.1"}
# The newest versions of those that manylinux_2_28 allows (auditwheel's policy).
CXX_RUNTIME_LIMITS = {"GLIBCXX": "3.4.24", "CXXABI": "1.3.11", "GCC": "7.0.0"}
TARGETS = {
    # CMake target: (what it exports, what else it may need besides glibc)
    "_native": ({"PyInit__native"}, set()),
    "_device": ({"PyInit__device"}, TORCH_LIBS | CXX_RUNTIME),
    "lazymlir-opt": (set(), set()),
}


def run(cmd, **kwargs):
    print("+", " ".join(shlex.quote(str(c)) for c in cmd)[:400], flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kwargs)


def zig_cc(python):
    return [python, "-m", "ziglang", "cc", "-target", f"x86_64-linux-gnu.{GLIBC}"]


def gcc_file(name):
    path = subprocess.run(["g++", f"-print-file-name={name}"], check=True, capture_output=True, text=True)
    path = Path(path.stdout.strip())
    if not path.is_absolute() or not path.exists():
        raise SystemExit(f"build_wheel: g++ has no {name}")
    return path


def runtime_archives():
    """GCC's C++ runtime and unwinder, linked statically (hidden by the version script)."""
    return [str(gcc_file(name)) for name in ("libstdc++.a", "libgcc_eh.a", "libgcc.a")]


def shared_runtime():
    """GCC's C++ runtime and unwinder as the shared libraries torch uses.

    For _device, whose C++ exceptions and objects cross into libtorch: one
    unwinder and one libstdc++ in the process. A static libgcc_eh there
    aborts on torch's exceptions thrown through _device (test_devices'
    refused ops); a static libstdc++ would keep a second count of
    uncaught exceptions. Its symbol versions are checked against
    manylinux_2_28's limits (CXX_RUNTIME_LIMITS)."""
    return [str(gcc_file("libstdc++.so")), str(gcc_file("libgcc_s.so.1")), str(gcc_file("libgcc.a"))]


def link_command(build, target):
    """CMake's final link command for `target` as a list of arguments."""
    out = subprocess.run(["ninja", "-C", build, "-t", "commands", target], check=True, capture_output=True, text=True)
    line = out.stdout.strip().splitlines()[-1]
    line = re.sub(r"^:\s*&&\s*", "", line)
    line = re.sub(r"\s*&&\s*:\s*$", "", line)
    args = shlex.split(line)
    if "-o" not in args:
        raise SystemExit(f"build_wheel: no -o in the link command of {target}: {line}")
    return args


def static_link(args, out, exports, python, objects, shared_cxx):
    """`args` (CMake's link command) rewritten for zig's driver and the archives."""
    result = zig_cc(python)
    uses_llvm = False
    skip = False
    for arg in args[1:]:
        if skip:
            skip = False
            continue
        if arg == "-o":
            result += ["-o", str(out)]
            skip = True
        elif arg.startswith("-Wl,-rpath,") or arg in ("-Wl,-s", "-ldl"):
            continue
        elif arg.startswith(str(LLVM_LIB) + "/"):
            # libMLIR.so, libLLVM.so, the runner utils (their memrefCopy is
            # memref_copy.c's) and what those need: replaced by the archives.
            uses_llvm = True
        else:
            result.append(arg)
    result += [str(o) for o in objects]
    if uses_llvm:
        archives = sorted(str(p) for p in LLVM_LIB.glob("lib*.a"))
        result += ["-Wl,--start-group", *archives, "-Wl,--end-group"]
        result += [str(SYSTEM_LIB / "libz.a"), str(SYSTEM_LIB / "libzstd.a")]
    result += shared_runtime() if shared_cxx else runtime_archives()
    result += ["-lm", "-lpthread", "-ldl", "-Wl,--gc-sections", "-s"]
    if "-shared" in args:
        script = out.with_suffix(out.suffix + ".map")
        script.write_text("{\n  global: " + "; ".join(sorted(exports)) + ";\n  local: *;\n};\n")
        result.append(f"-Wl,--version-script={script}")
    return result


def readelf(flags, path):
    return subprocess.run(["readelf", "-W", *flags, str(path)], check=True, capture_output=True, text=True).stdout


def version_key(version):
    return tuple(int(x) for x in version.split(".") if x.isdigit())


def check_binary(path, exports, allowed):
    """Fails unless `path` needs glibc (and `allowed`) only, references no
    glibc symbol newer than GLIBC (nor libstdc++/libgcc_s ones newer than
    manylinux_2_28 allows, where it may need those), and exports `exports`
    only. Returns what it needs and the newest glibc version, for the log."""
    dynamic = readelf(["-d"], path)
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic))
    extra = needed - GLIBC_LIBS - allowed
    problems = [f"needs {sorted(extra)}"] if extra else []
    symbols = readelf(["--dyn-syms"], path)
    versions = set(re.findall(r"@(GLIBC_[0-9.]+)", symbols))
    newest = max(versions, key=lambda v: version_key(v[6:]), default="GLIBC_0")
    if version_key(newest[6:]) > version_key(GLIBC):
        problems.append(f"references {newest}")
    for name, version in sorted(set(re.findall(r"@(GLIBCXX|CXXABI|GCC)_([0-9.]+)", symbols))):
        if not allowed & CXX_RUNTIME:
            problems.append(f"references {name}_{version} (libstdc++/libgcc_s should be static here)")
        elif version_key(version) > version_key(CXX_RUNTIME_LIMITS[name]):
            problems.append(f"references {name}_{version}, newer than manylinux_2_28 allows")
    exported = set()
    for line in symbols.splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(fields) >= 8 and fields[6] != "UND" and fields[4] in ("GLOBAL", "WEAK") and fields[3] != "SECTION":
            exported.add(fields[7].split("@")[0])
    # The loader's own symbols in an executable.
    unexpected = exported - exports - {"_IO_stdin_used", "__bss_start", "_edata", "_end", "__data_start"}
    if unexpected:
        problems.append(f"exports {len(unexpected)} unexpected symbols, e.g. {sorted(unexpected)[:5]}")
    if problems:
        raise SystemExit(f"build_wheel: {path.name}: " + "; ".join(problems))
    return sorted(needed), newest


def record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def metadata(project):
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project.get('description', '')}",
        f"Requires-Python: {project['requires-python']}",
    ]
    lines += [f"Requires-Dist: {dep}" for dep in project.get("dependencies", [])]
    return "\n".join(lines) + "\n"


def entry_points(project):
    out = io.StringIO()
    for group, entries in project.get("entry-points", {}).items():
        out.write(f"[{group}]\n")
        for name, value in entries.items():
            out.write(f"{name} = {value}\n")
        out.write("\n")
    return out.getvalue()


def package_files(source):
    """The package's files as scikit-build-core's wheel has them (pyproject's
    wheel.packages and wheel.exclude): the Python sources, not the C++."""
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source.parent)
        if path.is_dir() or "__pycache__" in rel.parts or path.suffix in (".pyc", ".so"):
            continue
        if rel.as_posix().startswith("lazymlir/frontend/csrc/"):
            continue
        yield path, rel.as_posix()


def write_wheel(path, project, files, tag):
    """files: (archive name, bytes, executable). Deterministic order and times."""
    name, version = project["name"], project["version"]
    dist_info = f"{name}-{version}.dist-info"
    files = list(files)
    files.append((f"{dist_info}/METADATA", metadata(project).encode(), False))
    files.append((f"{dist_info}/entry_points.txt", entry_points(project).encode(), False))
    wheel = f"Wheel-Version: 1.0\nGenerator: lazymlir tools/wheel/build_wheel.py\nRoot-Is-Purelib: false\nTag: {tag}\n"
    files.append((f"{dist_info}/WHEEL", wheel.encode(), False))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for arcname, data, _ in files:
        writer.writerow([arcname, record_hash(data), len(data)])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    files.append((f"{dist_info}/RECORD", record.getvalue().encode(), False))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for arcname, data, executable in files:
            info = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=6)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=str(ROOT / "build"), help="the developer build (make build)")
    parser.add_argument("--dist", default=str(ROOT / "dist"))
    parser.add_argument("--python", default=sys.executable, help="a Python with ziglang and auditwheel")
    args = parser.parse_args()
    build, dist = Path(args.build), Path(args.dist)
    stage = build / "wheel"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)

    run(["ninja", "-C", build, *TARGETS])
    objects = []
    for source in ("glibc_compat.c", "memref_copy.c"):
        obj = stage / (source + ".o")
        run(
            zig_cc(args.python)
            + [
                "-O2",
                "-fPIC",
                "-fvisibility=hidden",
                "-Wall",
                "-Werror",
                "-c",
                Path(__file__).parent / source,
                "-o",
                obj,
            ]
        )
        objects.append(obj)

    # The shims as a glibc older than 2.35 runs them, linked as the binaries are.
    here = Path(__file__).parent
    fallback = stage / "compat_fallback.o"
    run(
        zig_cc(args.python)
        + [
            "-O2",
            "-fPIC",
            "-Wall",
            "-Werror",
            "-include",
            here / "compat_fallback.h",
            "-c",
            here / "glibc_compat.c",
            "-o",
            fallback,
        ]
    )
    test_obj, test = stage / "compat_test.o", stage / "compat_test"
    run(["g++", "-O2", "-std=c++17", "-Wall", "-Werror", "-c", here / "compat_test.cpp", "-o", test_obj])
    run(
        zig_cc(args.python)
        + [test_obj, fallback, objects[1], *runtime_archives(), "-lm", "-lpthread", "-ldl", "-o", test]
    )
    run([test])

    binaries = {}
    for target, (exports, allowed) in TARGETS.items():
        cmake_args = link_command(build, target)
        built = Path(cmake_args[cmake_args.index("-o") + 1]).name
        out = stage / built
        cmd = static_link(cmake_args, out, exports, args.python, objects, shared_cxx=bool(allowed & CXX_RUNTIME))
        if target == "_device":
            cmd.append("-Wl,-rpath,$ORIGIN/../torch/lib")
        run(cmd, cwd=build)
        needed, newest = check_binary(out, exports, allowed)
        print(f"{built}: {out.stat().st_size / 2**20:.1f} MiB, needs {' '.join(needed)}; newest symbol {newest}")
        binaries[target] = out

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    project["entry-points"] = project.get("entry-points", {})
    files = [(rel, path.read_bytes(), False) for path, rel in package_files(ROOT / "python" / "lazymlir")]
    for target in ("_native", "_device"):
        files.append((f"lazymlir/{binaries[target].name}", binaries[target].read_bytes(), True))
    data = f"{project['name']}-{project['version']}.data"
    files.append((f"{data}/scripts/lazymlir-opt", binaries["lazymlir-opt"].read_bytes(), True))

    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    tag = f"{py}-{py}-linux_x86_64"
    wheel = stage / f"{project['name']}-{project['version']}-{tag}.whl"
    write_wheel(wheel, project, files, tag)
    print(f"{wheel}: {wheel.stat().st_size / 2**20:.1f} MiB")

    # auditwheel's verdict. `show` judges the symbol versions (torch's
    # libraries, which _device needs, are not in its list of system
    # libraries, so its overall answer is linux_x86_64 for any torch
    # extension); `repair`, told that torch provides those, must find the
    # wheel consistent with PLATFORM, retags it and grafts nothing.
    tools = dict(os.environ, PATH=f"{Path(args.python).parent}:{os.environ.get('PATH', '')}")
    auditwheel = [args.python, "-m", "auditwheel"]
    shown = subprocess.run([*auditwheel, "show", wheel], capture_output=True, text=True, check=True, env=tools)
    print(shown.stdout)
    excludes = [arg for lib in sorted(TORCH_LIBS) for arg in ("--exclude", lib)]
    dist.mkdir(parents=True, exist_ok=True)
    for old in dist.glob(f"{project['name']}-*.whl"):
        old.unlink()
    run([*auditwheel, "repair", "--plat", PLATFORM, "--only-plat", *excludes, "-w", dist, wheel], env=tools)
    (repaired,) = dist.glob(f"{project['name']}-*.whl")
    if not repaired.name.endswith(f"-{py}-{py}-{PLATFORM}.whl"):
        raise SystemExit(f"build_wheel: auditwheel repair wrote {repaired.name}")
    with zipfile.ZipFile(repaired) as zf:
        grafted = [n for n in zf.namelist() if n.startswith(f"{project['name']}.libs/")]
    if grafted:
        raise SystemExit(f"build_wheel: auditwheel grafted {grafted}: a binary needs a library it should not")
    print(f"{repaired}: {repaired.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
