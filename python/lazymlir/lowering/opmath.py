"""float16 and bfloat16 computed as eager computes them: each op in float32,
its result rounded once (``OpMathInterpreter``, run by ``linalg.decompose``
while it retraces the graph)."""

import torch

from ..dtypes import NORMALIZATIONS
from . import LoweringError


# float16 and bfloat16: eager's CPU kernels compute in float32 ("opmath")
# and round once, at the op's result. Compiled naively, a bfloat16 sum
# accumulates in bfloat16 (1% off over 512 values) and a decomposed op
# (gelu, log_softmax) rounds after every step. So each recorded op on them
# runs in float32 and its result is rounded to the op's dtype: the graph
# rounds where eager does, and nowhere else.
_LOW_PRECISION = (torch.float16, torch.bfloat16)
_aten = torch.ops.aten
# Ops that move or convert values: exact in any precision, or their dtype is
# the point (casts).
_NO_OPMATH = frozenset(
    {
        _aten._to_copy.default,
        _aten.clone.default,
        _aten.cat.default,
        _aten.stack.default,
        _aten.index.Tensor,
        _aten.index_select.default,
        _aten.gather.default,
        _aten.constant_pad_nd.default,
        _aten.slice_scatter.default,
        _aten.select_scatter.default,
        _aten.diagonal_scatter.default,
        _aten.as_strided_scatter.default,
        _aten.zeros.default,
        _aten.ones.default,
        _aten.full.default,
        _aten.zeros_like.default,
        _aten.ones_like.default,
        _aten.full_like.default,
        _aten.empty_like.default,
        _aten.scalar_tensor.default,
        _aten.lift_fresh_copy.default,
        _aten.alias.default,
    }
)


def uses_low_precision(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Whether float16 or bfloat16 values can appear in ``gm``: an input of
    that dtype or a cast to it."""
    if any(isinstance(t, torch.Tensor) and t.dtype in _LOW_PRECISION for t in example_inputs):
        return True
    for node in gm.graph.nodes:
        if node.op == "call_function":
            for a in torch.utils._pytree.tree_leaves((node.args, node.kwargs)):
                if isinstance(a, torch.dtype) and a in _LOW_PRECISION:
                    return True
    return False


def _opmath_dtype(target, args, kwargs):
    """The low-precision dtype ``target`` computes in when every floating
    argument has it (None: nothing to do: other dtypes, mixed ones, which
    promote to float32 anyway, or an op whose dtype is explicit); for a
    normalization, float32 parameters next to it too."""
    if not isinstance(target, torch._ops.OpOverload) or target in _NO_OPMATH or target.is_view:
        return None
    found = None
    # A normalization computes in float32 beside float32 parameters (its
    # decomposition, traced on CPU fake tensors, would round the statistics
    # to the input's dtype and compute the rest from the rounded ones).
    mixed = target in NORMALIZATIONS
    for a in torch.utils._pytree.tree_leaves((args, kwargs)):
        if isinstance(a, torch.Tensor):
            if a.dtype.is_floating_point or a.dtype.is_complex:
                if mixed and a.dtype == torch.float32:
                    continue
                if a.dtype not in _LOW_PRECISION or (found is not None and a.dtype != found):
                    return None
                found = a.dtype
        elif isinstance(a, torch.dtype):  # sum(dtype=), softmax(dtype=): the caller's choice
            return None
    if target in (_aten._softmax.default, _aten._log_softmax.default):
        half_to_float = args[2] if len(args) > 2 else kwargs.get("half_to_float", False)
        if half_to_float:  # a float32 result of low-precision input: the dtype is the point
            return None
    return found


class OpMathInterpreter(torch.fx.Interpreter):
    """Runs each op on float16/bfloat16 arguments in float32 and rounds its
    floating results back to the dtypes eager gives them (see
    _LOW_PRECISION): the trace's, from ``node.meta["lazymlir_dtypes"]``
    (ir.to_fx), since some ops return float32 statistics next to a
    bfloat16 result (the CPU flash attention's logsumexp). An op whose
    result dtypes are not known runs as recorded."""

    def run_node(self, n):
        self._dtypes = n.meta.get("lazymlir_dtypes")
        return super().run_node(n)

    def call_function(self, target, args, kwargs):
        low = _opmath_dtype(target, args, kwargs)
        dtypes = self._dtypes
        if dtypes is None:
            return super().call_function(target, args, kwargs)

        def up(a):
            return (
                _aten._to_copy.default(a, dtype=torch.float32) if isinstance(a, torch.Tensor) and a.dtype == low else a
            )

        if low is not None:
            args, kwargs = torch.utils._pytree.tree_map(up, (args, kwargs))
        # Mixed dtypes run as recorded; their results too take the trace's
        # dtypes (a decomposition may differ from eager's kernel: layer norm
        # of bfloat16 with float32 parameters keeps float32 statistics).
        result = target(*args, **kwargs)
        results = result if isinstance(result, (tuple, list)) else (result,)
        if len(results) != len(dtypes):
            raise LoweringError(f"{target}: {len(results)} results, the trace recorded {len(dtypes)}")
        rounded = [
            _aten._to_copy.default(r, dtype=dt)
            if isinstance(r, torch.Tensor) and dt is not None and r.dtype != dt
            else r
            for r, dt in zip(results, dtypes)
        ]
        return type(result)(rounded) if isinstance(result, (tuple, list)) else rounded[0]
