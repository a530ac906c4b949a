"""A graph's FX module run eagerly, op by op on CPU tensors: for a graph
that cannot compile, one forced eager, and a step waiting for its compile
aside. Each result is written where it will live (an output's buffer, a
donated input's, a temporary that dies with the op), as an eager program
with in-place ops would."""

import functools
import linecache
import re
from typing import List

import torch

from .. import _device
from ..trace import ir

aten = torch.ops.aten


def run_fx(gm, inputs: List[torch.Tensor], outs: List[torch.Tensor], donated=()) -> None:
    """Run a graph's FX module eagerly, its i-th result written into outs[i]
    as soon as it is computed (:func:`_into`): a result then dies at its
    last use, not at the end of the graph, and a step run eagerly holds its
    new state once, in ``outs``, instead of twice. ``donated``: (input,
    output) pairs whose output buffer may be the input's own (see
    ``donation.assign``). Grad mode and autocast are per thread: on the
    worker they are off; a waiting thread that runs the graph itself
    (run._wait_for) may be inside torch.autocast, which would change the
    recorded dtypes. Its large CPU allocations come from the runtime's
    buffer pool (``_device.pooled_allocations``: fresh glibc mappings fault
    their pages in on every run)."""
    pooled = _device.pooled_allocations(True)
    try:
        with torch.no_grad(), torch.autocast("cpu", enabled=False):
            _into(gm, tuple(donated))(*inputs, *outs)
    except Exception as e:
        _name_failed_op(e)
        raise
    finally:
        _device.pooled_allocations(pooled)


def _into(gm, donated: tuple):
    """``gm`` rewritten to take its outputs' buffers after its inputs and
    copy each result into its buffer right after the op that computes it
    (built once per module and donation). An output whose buffer may be
    donated input i's is written only after the last op reading input i or
    a view of it, or at the end when an output is such a view: then after
    the other outputs, from copies of the values that are views of donated
    inputs. Ops after a write read the output's buffer, not the result."""
    cache = gm.__dict__.setdefault("_lazymlir_into", {})
    built = cache.get(donated)
    if built is not None:
        return built
    nodes = list(gm.graph.nodes)
    output = nodes[-1]
    values = list(output.args[0])
    count = sum(n.op == "placeholder" for n in nodes)
    assert all(n.op == "placeholder" for n in nodes[:count]), "placeholders first"
    placeholders = nodes[:count]
    pos = {n: k for k, n in enumerate(nodes)}
    end = len(nodes)  # after every op
    at = [max(pos[v], count - 1) if isinstance(v, torch.fx.Node) else count - 1 for v in values]
    alias = _aliases(nodes, {placeholders[i]: i for i, _ in donated})
    shared = {n for n, inputs in alias.items() if inputs}  # views of donated inputs
    viewed = {i for v in values if isinstance(v, torch.fx.Node) for i in alias.get(v, ())}
    last_read = {}
    for n in nodes[:-1]:
        for a in n.all_input_nodes:
            for i in alias.get(a, ()):
                last_read[i] = pos[n]
    for i, j in donated:
        at[j] = end if i in viewed else max(at[j], last_read.get(i, at[j]))
    into = {j for _, j in donated}
    order = sorted(range(len(values)), key=lambda j: (at[j], j in into))
    direct, reuse = _reuse_plan(nodes, pos, values, at)
    order = [j for j in order if j not in direct.values()]
    g = torch.fx.Graph()
    env = {}
    buffers = []

    def write(j, value):
        # The buffer's pages now, from the pool's idle blocks (the op's own
        # temporaries died before it): not held through the ops before.
        g.call_function(_device.output_ready, (buffers[j],))
        g.call_function(aten.copy_.default, (buffers[j], value))
        v = values[j]
        if isinstance(v, torch.fx.Node) and env.get(v) is value:
            # Later readers read the buffer: the result dies now, not at its
            # last reader (an optimizer's new moments were held twice).
            env[v] = buffers[j]

    if count == 0:
        buffers = [g.placeholder(f"out{j}") for j in range(len(values))]
    for k, n in enumerate(nodes[:-1]):
        if n in direct:  # computed into its output's buffer
            j = direct[n]
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), env.__getitem__)
            g.call_function(_device.output_ready, (buffers[j],))
            val = n.meta[ir.VAL]
            env[n] = g.call_function(_computed_into, (n.target, buffers[j], tuple(val.shape), val.dtype, args, kwargs))
        elif n in reuse:  # computed into a temporary that dies here
            out_op, name = _out_variant(n.target)
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), env.__getitem__)
            env[n] = g.call_function(out_op, args, {**kwargs, name: env[reuse[n]]})
        else:
            env[n] = g.node_copy(n, env.__getitem__)
        if k == count - 1:
            buffers = [g.placeholder(f"out{j}") for j in range(len(values))]
        while order and at[order[0]] <= k:
            j = order.pop(0)
            write(j, env[values[j]] if isinstance(values[j], torch.fx.Node) else values[j])
    # Donated outputs written at the end: the values that are views of
    # donated inputs are copied before any of those inputs is overwritten.
    clones = {}
    for v in values if order else ():
        if isinstance(v, torch.fx.Node) and v in shared and v not in clones:
            clones[v] = g.call_function(aten.clone.default, (env[v],))
    for j in order:
        v = values[j]
        write(j, clones.get(v, env[v]) if isinstance(v, torch.fx.Node) else v)
    g.output(None)
    built = cache[donated] = torch.fx.GraphModule({}, g)
    return built


def _reuse_plan(nodes, pos, values, at):
    """Where a static graph's ops (``to_fx`` gave its values a meta) may write
    their results instead of a new tensor: ``direct``, op node -> j, for an
    output computed by an op with an out= variant and written right after it
    (``at[j]``): the op writes output j's buffer (``_computed_into``), no copy;
    ``reuse``, pointwise op node -> argument node, for an argument that is a
    new tensor of the result's shape and dtype which nothing (nor a view of
    it) reads after the op: the op writes over it, as an in-place op would.
    A step's optimizer, run eagerly, then allocates and copies a fraction of
    what its out-of-place ops would (an AdamW update is a dozen of them)."""
    direct, reuse = {}, {}
    value_set = {v for v in values if isinstance(v, torch.fx.Node)}
    for j, v in enumerate(values):
        if (
            isinstance(v, torch.fx.Node)
            and v not in direct
            and at[j] == pos[v]
            and ir.VAL in v.meta
            and _out_variant(v.target) is not None
        ):
            direct[v] = j
    alias = _aliases(nodes, {n: n for n in nodes if _fresh(n)})
    last_use = {}  # fresh node -> the last op that reads it or a view of it
    for b, roots in alias.items():
        for r in roots:
            last_use[r] = max([last_use.get(r, pos[r]), *(pos[u] for u in b.users)])

    for n in nodes:
        if n in direct or n.op != "call_function" or ir.VAL not in n.meta:
            continue
        if not isinstance(n.target, torch._ops.OpOverload) or torch.Tag.pointwise not in n.target.tags:
            continue
        if _out_variant(n.target) is None:
            continue
        val = n.meta[ir.VAL]
        args = [a for a in n.args if isinstance(a, torch.fx.Node)]
        for a in args:
            other = ir.VAL in a.meta and a.meta[ir.VAL]
            if (
                a in value_set
                or not _fresh(a)
                or other is False
                or other.shape != val.shape
                or other.dtype != val.dtype
                or last_use[a] > pos[n]
                or any(b is not a and a in alias.get(b, ()) for b in n.all_input_nodes)
            ):
                continue
            reuse[n] = a
            break
    return direct, reuse


def _fresh(n) -> bool:
    """Whether node ``n`` is an op whose one result is a new tensor."""
    return n.op == "call_function" and _one_new_tensor(n.target)


def _one_new_tensor(op) -> bool:
    """Whether ``op`` is an ATen op returning one tensor that aliases nothing."""
    if not isinstance(op, torch._ops.OpOverload):
        return False
    returns = op._schema.returns
    return len(returns) == 1 and returns[0].alias_info is None and str(returns[0].type) == "Tensor"


@functools.lru_cache(maxsize=None)
def _out_variant(op):
    """``op``'s out= overload and the name of its out argument: the overload
    that takes op's arguments plus one out tensor; None without one."""
    if not _one_new_tensor(op):
        return None
    want = [(a.name, str(a.type)) for a in op._schema.arguments]
    for name in op.overloadpacket.overloads():
        variant = getattr(op.overloadpacket, name)
        outs = [a for a in variant._schema.arguments if a.is_out]
        if len(outs) == 1 and [(a.name, str(a.type)) for a in variant._schema.arguments if not a.is_out] == want:
            return variant, outs[0].name
    return None


def _computed_into(op, buffer, shape, dtype, args, kwargs):
    """``op(*args, **kwargs)`` written into ``buffer`` (an output's): by its
    out= variant when the buffer has the result's shape and dtype and shares
    no memory with an argument (a pointwise op may read exactly the memory it
    writes: a donated input updated in place); else computed, then copied."""
    ok = buffer.shape == shape and buffer.dtype == dtype
    pointwise = torch.Tag.pointwise in op.tags
    for a in (*args, *kwargs.values()) if ok else ():
        if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr():
            same = a.data_ptr() == buffer.data_ptr() and a.shape == buffer.shape and a.stride() == buffer.stride()
            if not (pointwise and same):
                ok = False
                break
    if not ok:
        return buffer.copy_(op(*args, **kwargs))
    out_op, name = _out_variant(op)
    return out_op(*args, **kwargs, **{name: buffer})


def _aliases(nodes, sources: dict) -> dict:
    """For each node, the ``sources`` (node -> index) whose memory it may
    share: those it was computed from (directly or through other such
    nodes) by an op whose schema says its result may alias an argument, or
    by anything that is not an ATen op."""
    alias = {n: frozenset((i,)) for n, i in sources.items()}
    for n in nodes:
        if n.op != "call_function" or n in alias:
            continue
        found = frozenset().union(*(alias.get(a, frozenset()) for a in n.all_input_nodes))
        if not found:
            continue
        target = n.target
        if isinstance(target, torch._ops.OpOverload) and not any(
            r.alias_info is not None for r in target._schema.returns
        ):
            continue  # a new tensor
        alias[n] = found
    return alias


_OP_CALL = re.compile(r"torch\.ops\.(\w+)\.(\w+)\.(\w+)\(")


def _name_failed_op(e: BaseException) -> None:
    """A note on the error an FX graph raised: the aten op of its line in
    the graph's generated code (eager's messages, "index out of range in
    self", do not name it)."""
    tb = e.__traceback__
    op = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename.startswith("<eval_with_key>"):
            found = _OP_CALL.search(linecache.getline(code.co_filename, tb.tb_lineno, tb.tb_frame.f_globals))
            op = ".".join(found.groups()) if found else op
        tb = tb.tb_next
    if op is not None:
        e.add_note(f"lazymlir: raised by {op} in the step's graph, run eagerly")
