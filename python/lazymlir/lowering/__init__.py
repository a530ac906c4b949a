"""From a trace's FX graph to linalg-on-tensors text, through torch-mlir.

``decompositions``: the aten decompositions applied first; ``linalg``: the
decomposition, float16/bfloat16 rounding as eager does it, and torch-mlir's
FX import and backend pipeline."""


class LoweringError(Exception):
    """The graph cannot be lowered (torch-mlir failed, or an op is refused)."""
