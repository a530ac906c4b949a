"""Graph dumps: ``LAZYMLIR_DUMP_DIR=dir`` writes every compiled graph as
``<hash>.torch.mlir`` (torch backend IR; lowers with torch-mlir-opt),
``<hash>.linalg.mlir`` (what the native compiler took; ``lazymlir-opt
<hash>.linalg.mlir --lazymlir-cpu-pipeline`` reproduces the compilation) and
``<hash>.llvm.mlir`` (LLVM dialect after the CPU pipeline)."""

import os
from typing import Optional

from . import config


def dump(graph_hash: str, suffix: str, text: Optional[str]) -> Optional[str]:
    """Write ``<dump_dir>/<graph_hash>.<suffix>.mlir``; a no-op without a dump dir."""
    if not config.dump_dir or text is None:
        return None
    os.makedirs(config.dump_dir, exist_ok=True)
    path = os.path.join(config.dump_dir, f"{graph_hash}.{suffix}.mlir")
    with open(path, "w") as f:
        f.write(text)
    return path
