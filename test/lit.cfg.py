# -*- Python -*-
import os

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
llvm_config.add_tool_substitutions(
    ["lazymlir-opt"], [config.lazymlir_tools_dir]
)
llvm_config.add_tool_substitutions(["FileCheck", "not"], [config.llvm_tools_dir])
