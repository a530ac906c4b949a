"""From an FX graph of aten ops to linalg-on-tensors text, with torch-mlir.

The same route as ``torch_mlir.fx.export_and_import(..., output_type=
"linalg-on-tensors")``, minus torch.export (the trace is already a functional
aten graph): decompose with torch-mlir's table while re-tracing on fake tensors
(which also fills ``node.meta["val"]`` as its FxImporter expects), import into the
torch dialect, run the torch backend pipeline, then lower to linalg.  Only a cache
miss comes here, so the torch-mlir imports are deferred to the first miss.
"""

import operator
from typing import List, NamedTuple, Set

import torch


class Lowered(NamedTuple):
    torch_mlir: str  # torch backend IR (lowers further with torch-mlir-opt)
    linalg: str  # linalg-on-tensors: what the native compiler takes
    # For each output of the FX graph, the index of the result of @main that holds
    # it: outputs that lowered to the same SSA value are returned once.
    output_map: tuple


class LoweringError(Exception):
    pass


_decompositions = None


def _decomposition_table():
    global _decompositions
    if _decompositions is None:
        from torch_mlir.extras.fx_decomp_util import get_decomposition_table

        table = dict(get_decomposition_table())
        # Our own decompositions of ops that torch-mlir would lower to its TMTensor
        # dialect (scatter), which the native compiler does not take.
        table[torch.ops.aten.nll_loss_backward.default] = _nll_loss_backward
        _decompositions = table
    return _decompositions


def _nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    """torch._decomp's nll_loss_backward with its scatter of -1 into zeros
    replaced by a one-hot comparison with arange: the same values, in ops that
    lower to plain linalg."""
    channel_dim = 0 if self.dim() < 2 else 1
    if reduction == 1:  # mean
        grad_output = grad_output / total_weight
    if self.dim() == 1 and target.dim() > 0:
        target = target[0]
    target = target.unsqueeze(channel_dim)
    classes = torch.arange(self.shape[channel_dim], device=target.device)
    if self.dim() >= 2:
        classes = classes.reshape([1, -1] + [1] * (self.dim() - 2))
    grad_input = -(classes == target).to(self.dtype)
    if grad_input.dim() > grad_output.dim() > 0:
        grad_output = grad_output.unsqueeze(channel_dim)
    if weight is not None:
        shape = [1] * self.dim()
        shape[channel_dim] = weight.shape[0]
        grad_output = grad_output * weight.reshape(shape)
    grad_output = torch.where(target != ignore_index, grad_output, 0)
    return grad_input * grad_output


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
        output_map = _return_each_value_once(module)
        linalg = str(module)
    except Exception as e:  # torch-mlir raises many kinds; all mean "cannot compile"
        raise LoweringError(f"{type(e).__name__}: {e}") from e
    if "tm_tensor." in linalg:
        # torch-mlir's own dialect for scatter/sort/scan: not in the backend
        # contract of the native compiler (MLIR 22 does not know it).
        raise LoweringError("the lowering uses torch-mlir's TMTensor dialect, which the native compiler does not take")
    return Lowered(torch_text, linalg, output_map)


def _return_each_value_once(module) -> tuple:
    """Make @main return each SSA value once; returns the output -> result map.

    Distinct trace outputs often lower to one value (``buf = grad.clone()``:
    torch-mlir folds the clone).  Returning a value twice crashes MLIR's
    buffer-results-to-out-params in the native pipeline (repro:
    /tmp/lazymlir-repro-duplicate-results), and would copy it twice anyway."""
    from torch_mlir import ir

    with module.context, ir.Location.unknown():
        main = next(op for op in module.body.operations
                    if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main")
        block = main.regions[0].blocks[0]
        ret = list(block.operations)[-1]
        values = list(ret.operands)
        unique, output_map = [], []
        for v in values:
            for i, u in enumerate(unique):
                if u == v:
                    output_map.append(i)
                    break
            else:
                output_map.append(len(unique))
                unique.append(v)
        if len(unique) < len(values):
            ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
            main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(ftype.inputs, [v.type for v in unique]))
            with ir.InsertionPoint(ret):
                ir.Operation.create("func.return", operands=unique)
            ret.erase()
    return tuple(output_map)


def find_unsupported(graph, limit: int = 64) -> Set:
    """The ops of ``graph`` that do not lower on their own: each distinct op is
    tried once, alone, on zero inputs of the same shapes and dtypes.  Empty when
    every op of a graph with several fails, which means the pipeline, not an op,
    is broken."""
    from .trace import Graph, Node, map_nodes, to_fx

    bad = set()
    tried = set()
    for n in graph.nodes:
        if not isinstance(n.op, torch._ops.OpOverload) or n.op in tried or len(tried) >= limit:
            continue
        tried.add(n.op)
        leaves = {}
        for i in n.inputs:
            if i not in leaves:
                leaves[i] = Node.leaf(torch.zeros(i.meta.shape, dtype=i.meta.dtype))

        alone = Node(n.op, map_nodes(n.args, leaves.__getitem__),
                     {k: map_nodes(v, leaves.__getitem__) for k, v in n.kwargs.items()},
                     tuple(leaves[i] for i in n.inputs), n.sig, n.meta)
        outputs = [alone]
        if not isinstance(n.meta, torch.Tensor):  # multi-output: return its first tensor
            outputs = [Node(operator.getitem, (alone, 0), {}, (alone,), (operator.getitem, 0), n.meta[0])]
        nodes = [alone] + [o for o in outputs if o is not alone]
        single = Graph(None, list(leaves.values()), nodes, outputs)
        try:
            lower(to_fx(single), [leaf.data for leaf in single.inputs])
        except LoweringError:
            bad.add(n.op)
    if len(tried) > 1 and bad == tried:  # nothing lowers: the pipeline is at fault, not an op
        return set()
    return bad
