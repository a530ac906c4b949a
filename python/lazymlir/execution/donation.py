"""In-place state (issue 49): a step's new parameters, gradients and
optimizer moments written into the buffers their old values came in, as
XLA's input-output aliasing does, so the old and the new model are never
both alive.

The frontend offers the candidates (``frontend.barriers._sync``, for a
barrier that computes every pending storage): for each storage it
computes, the data node of its value before the step's writes
(``Storage.prior``) and the node of its new value. :func:`offer` keeps the
pairs that are an input and an output of the graph with the same buffer
layout, and names them in the cache key; the graph is compiled with those
inputs donated (``compile_linalg(donate=...)``: lazymlir-donate-arguments
writes each output into its input's buffer, lazymlir-guard-donated-writes
skips those writes when a runtime check failed). Each run then decides
(:func:`assign`): the input's buffer is handed over only when nothing
else can read the old value; otherwise the output gets a buffer of its
own, filled with the old value before the run (copy semantics, the same
compiled code: ``entries.Compiled.run_into``)."""

import sys
from typing import List

import torch

from .. import config, metrics
from ..trace import ir


def offer(graph: ir.Graph, donate) -> ir.Graph:
    """``graph`` with the (input, output) pairs it may donate in its key,
    from ``donate``'s (old value node, new value node) pairs: both in the
    graph, the input's buffer dense in the output's shape and dtype, and at
    least config.donate_min_bytes of them in all (or ``graph`` unchanged)."""
    if config.donate_min_bytes < 0:
        return graph
    position = {id(n): i for i, n in enumerate(graph.inputs)}
    result = {id(n): j for j, n in enumerate(graph.outputs)}
    in_perms, out_perms = graph.input_perms, graph.output_perms
    pairs = []
    total = 0
    for old, new in donate:
        i, j = position.get(id(old)), result.get(id(new))
        if i is None or j is None or any(i == a or j == b for a, b in pairs):
            continue  # each buffer given once, each output written once
        if (in_perms and in_perms[i] is not None) or (out_perms and out_perms[j] is not None):
            continue  # a permuted buffer: its view is one more owner
        data = old.data
        meta = new.meta
        if data.dtype != meta.dtype or data.shape != meta.shape or not data.is_contiguous():
            continue
        pairs.append((i, j))
        total += data.numel() * data.element_size()
    if not pairs or total < config.donate_min_bytes:
        return graph
    return ir.with_donations(graph, tuple(sorted(pairs)))


def input_uses(graph: ir.Graph, pairs) -> tuple:
    """For each pair, how many times the graph's ops take its input: each
    such use holds two references to the input's node (the op's args and
    its inputs), which :func:`assign` expects to find and no others."""
    if graph.lifted is None:  # a key seen before: collected without its nodes' details
        graph = ir.collect(graph.outputs, graph.key[3], full=True)
    wanted = {id(graph.inputs[i]): 0 for i, _ in pairs}
    for n in graph.nodes:
        for x in n.inputs:
            if id(x) in wanted:
                wanted[id(x)] += 1
    return tuple(wanted[id(graph.inputs[i])] for i, _ in pairs)


# References to a donated input's node and tensor that assign() accounts
# for besides the graph's own uses (measured once: _calibrate).
_NODE_REFS = None
_TENSOR_REFS = None


def _refs(node, tensor):
    return sys.getrefcount(node), sys.getrefcount(tensor)


def _calibrate() -> None:
    """The reference counts of an input nothing else holds, as assign() sees
    them: the storage's ``prior``, the graph's input list, the barrier's
    offer, the run's argument list, and this module's own frames."""
    global _NODE_REFS, _TENSOR_REFS
    node = ir.Node(None, None, None, (), None, None)  # this local: the storage's prior
    node.data = torch.empty(1)
    graph_inputs = [node]
    offered = [(node, None)]  # noqa: F841
    arguments = [node.data]
    _NODE_REFS, _TENSOR_REFS = _probe(graph_inputs, 0, arguments)


def _probe(graph_inputs, i, arguments):
    node = graph_inputs[i]
    tensor = arguments[i]
    return _refs(node, tensor)


def assign(entry, graph: ir.Graph, inputs: List[torch.Tensor], outs: list, allowed: bool, output_buffer) -> None:
    """Fill ``outs``' donated places (None) for one run of ``entry``: with
    the input itself when ``allowed`` (not run ahead of queued jobs, which
    may still read it) and nothing else holds its node, its tensor or its
    memory; else with a new buffer (copy semantics). Counted as
    ``DonatedBuffers`` and ``DonationCopies``."""
    if _NODE_REFS is None:
        _calibrate()
    donated = copied = 0
    for (i, j), uses in zip(entry.donated, entry.donated_uses):
        if allowed and _unshared(graph.inputs, i, inputs, uses):
            outs[j] = inputs[i]
            donated += 1
        else:
            t = inputs[i]
            outs[j] = output_buffer(tuple(t.shape), t.dtype)
            copied += 1
    if donated:
        metrics.counter("DonatedBuffers", donated)
    if copied:
        metrics.counter("DonationCopies", copied)


def _unshared(graph_inputs, i, arguments, uses) -> bool:
    node_refs, tensor_refs = _probe(graph_inputs, i, arguments)
    if node_refs != _NODE_REFS + 2 * uses or tensor_refs != _TENSOR_REFS:
        return False  # another storage, a view's value, a queued job, the user
    tensor = arguments[i]
    # No other tensor shares its memory (a view, a CPU tensor it came from).
    return tensor._use_count() == 1 and torch._C._storage_Use_Count(tensor.untyped_storage()._cdata) == 2
