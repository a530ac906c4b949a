"""Graph dumps: ``LAZYMLIR_DUMP_DIR=dir`` writes every compiled graph as
``<hash>.torch.mlir`` (torch backend IR; lowers with torch-mlir-opt),
``<hash>.linalg.mlir`` (what the native compiler took; ``lazymlir-opt
<hash>.linalg.mlir --lazymlir-cpu-pipeline`` reproduces the compilation) and
``<hash>.llvm.mlir`` (LLVM dialect after the CPU pipeline; its module attribute
``lazymlir.kernel_count`` is the kernel count).  Once the graph has compiled, every
dump file starts with the comment ``// lazymlir: N kernels (loop nests) after
fusion``."""

import os
from typing import Optional

from . import config


def kernels_comment(kernel_count: int) -> str:
    return f"// lazymlir: {kernel_count} kernels (loop nests) after fusion\n"


def dump(graph_hash: str, suffix: str, text: Optional[str], kernel_count: Optional[int] = None) -> Optional[str]:
    """Write ``<dump_dir>/<graph_hash>.<suffix>.mlir`` (headed by the kernel count
    when given); a no-op without a dump dir."""
    if not config.dump_dir or text is None:
        return None
    if kernel_count is not None:
        text = kernels_comment(kernel_count) + text
    os.makedirs(config.dump_dir, exist_ok=True)
    path = os.path.join(config.dump_dir, f"{graph_hash}.{suffix}.mlir")
    with open(path, "w") as f:
        f.write(text)
    return path
