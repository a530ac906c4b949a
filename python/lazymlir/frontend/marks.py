"""lazymlir.mark_dynamic / mark_static: a lazy tensor's dimensions marked
symbolic or static, on its device data, for the dynamic-shape stage
(dynamic.py) to read when it generalizes a graph."""

import torch

from ..trace import dynamic
from .tensor import state


def _leaf_of(t, what: str):
    st = state(t)
    if st is None:
        raise TypeError(f"lazymlir.{what}: not a lazy tensor")
    if st.chain:
        raise ValueError(f"lazymlir.{what}: the tensor is a view; mark the tensor it views")
    return st.storage.base


def _mark(t, dims, value: bool, what: str) -> None:
    node = _leaf_of(t, what)
    for dim in [dims] if isinstance(dims, int) else dims:
        if not -t.dim() <= dim < t.dim():
            raise IndexError(f"lazymlir.{what}: dimension {dim} out of range for a {t.dim()}-d tensor")
        dynamic.mark(node, dim % t.dim(), value)


def mark_dynamic(t: torch.Tensor, dim) -> None:
    """Compile the graphs that read ``t`` with dimension ``dim`` (an int or a
    list) symbolic from the first trace on, like torch._dynamo.mark_dynamic.
    ``t``: a lazy tensor that is not a view (a batch moved to the device).
    A size below 2 stays static (PyTorch specializes 0 and 1)."""
    _mark(t, dim, True, "mark_dynamic")


def mark_static(t: torch.Tensor, dim) -> None:
    """Never make dimension ``dim`` of ``t`` symbolic: each size compiles its
    own graph (a shape the kernels should be specialized for)."""
    _mark(t, dim, False, "mark_static")
