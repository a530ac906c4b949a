"""The dtypes compiled graphs take and return: the package's one table of them.

The native side has its own (C++ ``lazymlir::ElementType``, the contract check
``lazymlir-verify-backend-contract``); a graph with any other dtype runs eagerly.
"""

import torch

# dtype -> (MLIR element type at the boundary, DLPack (type code, bits)).
_COMPILED = {
    torch.float32: ("f32", (2, 32)),
    torch.float64: ("f64", (2, 64)),
    torch.float16: ("f16", (2, 16)),
    torch.bfloat16: ("bf16", (4, 16)),
    torch.int32: ("i32", (0, 32)),
    torch.int64: ("i64", (0, 64)),
    torch.bool: ("i1", (6, 8)),  # bytes in memory, as torch's bool
}

#: The dtypes a compiled graph can take and return.
SUPPORTED = frozenset(_COMPILED)


def element_type(dtype: torch.dtype) -> str:
    """The MLIR element type ``dtype`` crosses the boundary as."""
    return _COMPILED[dtype][0]


def dlpack_code(dtype: torch.dtype):
    """DLPack's (type code, bits) of ``dtype``; None for a dtype graphs do not take."""
    entry = _COMPILED.get(dtype)
    return None if entry is None else entry[1]
