"""The dtypes compiled graphs take and return: the package's one table of them.

The native side has its own (C++ ``lazymlir::ElementType``, the contract check
``lazymlir-verify-backend-contract``); a graph with any other dtype runs eagerly.
"""

import torch

# dtype -> the MLIR element type it crosses the boundary as.
_COMPILED = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.bool: "i1",  # bytes in memory, as torch's bool
}

#: The dtypes a compiled graph can take and return.
SUPPORTED = frozenset(_COMPILED)

_aten = torch.ops.aten
#: Normalizations whose eager CPU kernels take a bfloat16/float16 input with
#: float32 parameters ("mixed"), compute in float32, and return their saved
#: (and running) statistics in the input's dtype, or in float32 when mixed
#: (frontend/meta.py gives the trace those dtypes, lowering/opmath.py
#: computes them so).
NORMALIZATIONS = frozenset(
    {
        _aten.native_layer_norm.default,
        _aten.native_group_norm.default,
        _aten.native_batch_norm.default,
        _aten._native_batch_norm_legit.default,
        _aten._native_batch_norm_legit.no_stats,
        _aten._native_batch_norm_legit_functional.default,
        _aten._native_batch_norm_legit_no_training.default,
    }
)


def element_type(dtype: torch.dtype) -> str:
    """The MLIR element type ``dtype`` crosses the boundary as."""
    return _COMPILED[dtype]
