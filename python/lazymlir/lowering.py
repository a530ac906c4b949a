"""From an FX graph of aten ops to linalg-on-tensors text, with torch-mlir.

The same route as ``torch_mlir.fx.export_and_import(..., output_type=
"linalg-on-tensors")``, minus torch.export (the trace is already a functional
aten graph): decompose with torch-mlir's table while re-tracing on fake tensors
(which also fills ``node.meta["val"]`` as its FxImporter expects), import into the
torch dialect, run the torch backend pipeline, then lower to linalg.  Only a cache
miss comes here, so the torch-mlir imports are deferred to the first miss.
"""

from typing import List, NamedTuple

import torch


class Lowered(NamedTuple):
    torch_mlir: str  # torch backend IR (lowers further with torch-mlir-opt)
    linalg: str  # linalg-on-tensors: what the native compiler takes


class LoweringError(Exception):
    pass


_decompositions = None


def _decomposition_table():
    global _decompositions
    if _decompositions is None:
        from torch_mlir.extras.fx_decomp_util import get_decomposition_table

        _decompositions = get_decomposition_table()
    return _decompositions


def decompose(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> torch.fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(gm, decomposition_table=_decomposition_table(), tracing_mode="fake")(*example_inputs)


def lower(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]) -> Lowered:
    """Raises LoweringError (with torch-mlir's diagnostics) on any failure."""
    try:
        from torch_mlir import fx as tm_fx
        from torch_mlir.compiler_utils import OutputType, lower_mlir_module

        decomposed = decompose(gm, example_inputs)
        module = tm_fx.stateless_fx_import(decomposed, output_type=OutputType.TORCH, model_name="main")
        torch_text = str(module)
        lower_mlir_module(False, OutputType.LINALG_ON_TENSORS, module)
        return Lowered(torch_text, str(module))
    except Exception as e:  # torch-mlir raises many kinds; all mean "cannot compile"
        raise LoweringError(f"{type(e).__name__}: {e}") from e
