# -*- Python -*-
import glob
import os
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "LAZYMLIR"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.lazymlir_obj_root, "test")
# Python tests are pytest's, not lit's.
config.excludes = ["python", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(["lazymlir-opt"], [config.lazymlir_tools_dir])
llvm_config.add_tool_substitutions(["FileCheck", "not"], [config.llvm_tools_dir])

# docs/Passes.md against what Passes.td generates (test/Docs/pass-doc.mlir):
# Debian's mlir-tblgen (mlir-22-tools), the repository and MLIR's .td files.
llvm_config.add_tool_substitutions(["mlir-tblgen"], [config.llvm_tools_dir])
config.substitutions.append(("%lazymlir_src", os.path.dirname(config.test_source_root)))
# (A site config from before mlir_include_dirs: the LLVM install's include.)
_mlir_include_dirs = getattr(
    config, "mlir_include_dirs", os.path.join(os.path.dirname(config.llvm_tools_dir), "include")
)
config.substitutions.append(("%mlir_includes", " ".join("-I " + d for d in _mlir_include_dirs.split(";") if d)))

# The GPU pipeline's checks need libdevice (linked into kernels that call
# math functions) and ptxas (assembles the PTX): from the nvidia-nvvm and
# nvidia-cuda-nvcc wheels `make test` installs into .venv, LAZYMLIR_CUDA_PATH
# or /usr/local/cuda. Tests that need them say REQUIRES: libdevice / ptxas.


def _cuda_roots():
    if os.environ.get("LAZYMLIR_CUDA_PATH"):
        yield os.environ["LAZYMLIR_CUDA_PATH"]
    repo = os.path.dirname(config.test_source_root)
    yield from sorted(glob.glob(os.path.join(repo, ".venv", "lib", "python3*", "site-packages", "nvidia", "cu13")))
    yield "/usr/local/cuda"


for root in _cuda_roots():
    libdevice = os.path.join(root, "nvvm", "libdevice", "libdevice.10.bc")
    if "libdevice" not in config.available_features and os.path.exists(libdevice):
        config.available_features.add("libdevice")
        config.substitutions.append(("%libdevice", libdevice))
    ptxas = os.path.join(root, "bin", "ptxas")
    if "ptxas" not in config.available_features and os.access(ptxas, os.X_OK):
        config.available_features.add("ptxas")
        config.substitutions.append(("%ptxas", ptxas))
config.substitutions.append(("%python", sys.executable))
