"""Dynamic dimensions (lazymlir.trace.dynamic): one compiled graph for every size.

Every test checks results against eager PyTorch at each size, and counters
that prove how many graphs were compiled (UncachedCompile: all,
DynamicCompile: those with symbolic dimensions) and that the dynamic graph ran
(DynamicGraphHit), not an eager fallback."""

import copy

import pytest
import torch
import torch.nn as nn

import lazymlir
from lazymlir import config, metrics, testing
from lazymlir.execution import native


@pytest.fixture(autouse=True)
def fresh():
    lazymlir.wait_device_ops()
    lazymlir.cache.clear()
    metrics.reset()
    with config.patch(cache_dir=None, dynamic=True):
        yield


def counts():
    return {
        k: metrics.counter_value(k)
        for k in (
            "UncachedCompile",
            "DynamicCompile",
            "DynamicGraphHit",
            "DynamicCompileFallback",
            "CompileFallback",
            "DynamicValidationMismatch",
        )
    }


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10), nn.LogSoftmax(1))


def test_mlp_inference_every_batch_size_two_graphs():
    m = mlp()
    lazy = copy.deepcopy(m).to("lazy")
    sizes = list(range(1, 18)) + [64, 3]
    with torch.no_grad():
        for b in sizes:
            x = torch.randn(b, 64)
            torch.testing.assert_close(lazy(x.to("lazy")).cpu(), m(x), rtol=1e-5, atol=1e-5)
    c = counts()
    assert c["UncachedCompile"] == 2  # batch 1 (sizes of 1 stay static), then the dynamic graph
    assert c["DynamicCompile"] == 1
    assert c["DynamicGraphHit"] == len(set(sizes)) - 2
    assert c["CompileFallback"] == 0


def test_mlp_training_matches_eager_and_compiles_once_per_step_kind():
    m = mlp()
    me, ml = copy.deepcopy(m), copy.deepcopy(m).to("lazy")
    oe = torch.optim.AdamW(me.parameters(), 1e-2)
    ol = torch.optim.AdamW(ml.parameters(), 1e-2)
    torch.manual_seed(1)
    for b in [4, 5, 6, 9, 31, 2, 64, 7]:
        x, y = torch.randn(b, 64), torch.randint(0, 10, (b,))
        le = testing.train_step(me, oe, x, y, "cpu")
        ll = testing.train_step(ml, ol, x, y, "lazy")
        torch.testing.assert_close(ll.item(), le.item(), rtol=1e-5, atol=1e-5)
    for p, q in zip(ml.parameters(), me.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)
    c = counts()
    # Every step is one graph (AdamW's zeros_like state is data when the first
    # step writes it): static at batch 4, then once with a symbolic batch.
    assert c["UncachedCompile"] == 2
    assert c["DynamicCompile"] == 1
    assert c["DynamicGraphHit"] == 6


def test_dynamic_off_compiles_every_size():
    m = mlp()
    lazy = copy.deepcopy(m).to("lazy")
    with config.patch(dynamic=False), torch.no_grad():
        for b in [2, 3, 4]:
            x = torch.randn(b, 64)
            torch.testing.assert_close(lazy(x.to("lazy")).cpu(), m(x), rtol=1e-5, atol=1e-5)
    assert counts()["UncachedCompile"] == 3
    assert counts()["DynamicCompile"] == 0


def test_mark_dynamic_compiles_symbolic_from_the_first_trace():
    m = mlp()
    lazy = copy.deepcopy(m).to("lazy")
    with torch.no_grad():
        for b in [8, 3, 40]:
            x = torch.randn(b, 64)
            xl = x.to("lazy")
            lazymlir.mark_dynamic(xl, 0)
            torch.testing.assert_close(lazy(xl).cpu(), m(x), rtol=1e-5, atol=1e-5)
    c = counts()
    assert c["UncachedCompile"] == 1
    assert c["DynamicCompile"] == 1
    assert c["DynamicGraphHit"] == 2


def test_mark_static_pins_a_dimension():
    m = mlp()
    lazy = copy.deepcopy(m).to("lazy")
    with torch.no_grad():
        for b in [2, 3, 4]:
            x = torch.randn(b, 64)
            xl = x.to("lazy")
            lazymlir.mark_static(xl, 0)
            torch.testing.assert_close(lazy(xl).cpu(), m(x), rtol=1e-5, atol=1e-5)
    assert counts()["UncachedCompile"] == 3
    assert counts()["DynamicCompile"] == 0


def test_marks_refuse_views_and_bad_dimensions():
    x = torch.randn(4, 6).to("lazy")
    with pytest.raises(ValueError, match="view"):
        lazymlir.mark_dynamic(x[1:], 0)
    with pytest.raises(IndexError):
        lazymlir.mark_dynamic(x, 2)
    with pytest.raises(TypeError):
        lazymlir.mark_static(torch.randn(3), 0)


def test_sizes_that_follow_the_inputs_become_expressions():
    # view(b * 2, 32) and a slice to b - 1 rows: functions of the batch.
    def f(x):
        b = x.shape[0]
        return (x.view(b * 2, 32) * 2)[: b - 1].sum(0), x[1:] * 3

    for b in [3, 4, 7, 20]:
        x = torch.randn(b, 64)
        got = f(x.to("lazy"))
        lazymlir.sync(list(got))  # one graph
        want = f(x)
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-4)
    c = counts()
    assert c["UncachedCompile"] == 2 and c["DynamicCompile"] == 1 and c["DynamicGraphHit"] == 2


def test_products_of_sizes_are_fitted():
    # b * b: the product of the symbol with itself fits 2 -> 4, 3 -> 9.
    def f(x):
        b = x.shape[0]
        return x.new_ones(b * b) * x.sum()

    for b in [2, 3, 5, 4]:
        x = torch.randn(b, 8)
        torch.testing.assert_close(f(x.to("lazy")).cpu(), f(x), rtol=1e-5, atol=1e-5)
    c = counts()
    assert (c["UncachedCompile"], c["DynamicCompile"], c["DynamicGraphHit"]) == (2, 1, 2)


def test_a_wrong_guess_never_gives_a_wrong_value():
    # b ** 3: fitted as the line 19b - 30 through the first two sizes (8 and
    # 27), which the next sizes do not follow: their traces compile static,
    # with the right result.
    def f(x):
        b = x.shape[0]
        return x.new_ones(b * b * b) * x.sum()

    for b in [2, 3, 5, 4]:
        x = torch.randn(b, 8)
        torch.testing.assert_close(f(x.to("lazy")).cpu(), f(x), rtol=1e-5, atol=1e-5)
    c = counts()
    assert c["DynamicCompile"] == 1
    assert c["DynamicGraphHit"] == 0
    assert c["UncachedCompile"] == 4


def test_integers_that_change_with_no_input_size_become_symbols():
    # x[:k] of a fixed x: k is the size of a phantom input of the dynamic
    # graph. (The slice's guard k <= 10 comes from the ShapeEnv.)
    x = torch.randn(10, 8)
    xl = x.to("lazy")
    for k in [2, 3, 4, 9, 10]:
        torch.testing.assert_close(xl[:k].sum(0).cpu(), x[:k].sum(0))
    c = counts()
    assert (c["UncachedCompile"], c["DynamicCompile"], c["DynamicGraphHit"]) == (2, 1, 3), c
    # Values below 2 stay static (PyTorch specializes 0 and 1).
    torch.testing.assert_close(xl[:1].sum(0).cpu(), x[:1].sum(0))
    assert counts()["UncachedCompile"] == 3


def test_zero_input_graph_with_sizes_from_python():
    # torch.ones(4, t) made on the device: no input carries t.
    for t in [3, 5, 17]:
        got = (torch.ones(4, t, device="lazy") * 2).sum(1)
        torch.testing.assert_close(got.cpu(), torch.full((4,), 2.0 * t))
    c = counts()
    assert (c["UncachedCompile"], c["DynamicCompile"], c["DynamicGraphHit"]) == (2, 1, 1), c


def test_storm_warning_names_the_dimension():
    x = torch.randn(1, 8)
    with config.patch(dynamic=False, recompile_warning_at=3):
        with pytest.warns(RuntimeWarning, match=r"input 0 dim 0: 3 -> 4"):
            for b in [2, 3, 4]:
                (torch.randn(b, 8).to("lazy") * 2).cpu()
    del x


def test_native_executable_with_dynamic_dimensions():
    text = """
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%arg0: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %c0 = arith.constant 0 : index
  %d = tensor.dim %arg0, %c0 : tensor<?x4xf32>
  %e = tensor.empty(%d) : tensor<?x4xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]}
      ins(%arg0 : tensor<?x4xf32>) outs(%e : tensor<?x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %in : f32
    linalg.yield %s : f32
  } -> tensor<?x4xf32>
  return %r : tensor<?x4xf32>
}
"""
    exe = native.compile_linalg(text)
    assert exe.is_dynamic
    assert exe.inputs == [("f32", (-1, 4))]
    for n in [1, 5, 1000]:
        x = torch.randn(n, 4)
        out = torch.empty(n, 4)
        exe.run([x], [out])
        torch.testing.assert_close(out, x * 2)
    with pytest.raises(ValueError, match="shape"):
        exe.run([torch.randn(3, 5)], [torch.empty(3, 5)])
    # Raw buffers (the lazy runtime's runs after the first) carry their sizes.
    for n in [2, 7]:
        x, out = torch.randn(n, 4), torch.empty(n, 4)
        native.run_allocated(exe, [x], [out], dynamic=True)
        torch.testing.assert_close(out, x * 2)
    with pytest.raises(ValueError, match="dynamic"):
        native.run_allocated(exe, [torch.randn(3, 4)], [torch.empty(3, 4)])
    with pytest.raises(ValueError, match="do not fit"):
        native.run_allocated(exe, [torch.randn(3, 5)], [torch.empty(3, 5)], dynamic=True)
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match="bytes"):  # sizes that do not match the buffer
        exe.run_raw([x.data_ptr()], [x.nbytes], [x.data_ptr()], [x.nbytes], False, [[3, 4], [6, 4]])


def _fresh_process(script: str, cache_dir, sizes) -> dict:
    """``script`` run in a fresh process on the disk cache ``cache_dir`` with
    ``sizes`` (JSON) as its argument: the JSON of its last line."""
    import json
    import os
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(sizes)],
        capture_output=True,
        text=True,
        env=dict(os.environ, LAZYMLIR_CACHE_DIR=str(cache_dir)),
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


_DISK_SCRIPT = r"""
import json, sys, torch, torch.nn as nn
import lazymlir
from lazymlir import metrics
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)).to("lazy")
worst = 0.0
with torch.no_grad():
    for b in json.loads(sys.argv[1]):
        x = torch.randn(b, 64)
        got = m(x.to("lazy")).cpu()
        want = m.to("cpu")(x); m.to("lazy")
        worst = max(worst, (got - want).abs().max().item())
print(json.dumps({k: metrics.counter_value(k) for k in
                  ("UncachedCompile", "DynamicCompile", "DynamicGraphHit", "DiskCacheHit")} | {"worst": worst}))
"""


@pytest.mark.slow
def test_disk_cache_keeps_dynamic_graphs(tmp_path):
    """A second process finds the first one's dynamic graph on disk: sizes it
    never saw run without any compile."""

    def run(sizes):
        return _fresh_process(_DISK_SCRIPT, tmp_path, sizes)

    first = run([2, 3, 4])
    assert (first["UncachedCompile"], first["DynamicCompile"], first["DynamicGraphHit"]) == (2, 1, 1)
    second = run([7, 9, 30])
    assert second["DynamicCompile"] == 0
    assert second["UncachedCompile"] == 1  # loaded from disk, not compiled
    assert second["DiskCacheHit"] == 1
    assert second["DynamicGraphHit"] == 3
    assert max(first["worst"], second["worst"]) < 1e-5


def test_transformer_lm_training_over_sequence_lengths():
    """The 2-layer torch.nn LM (embeddings, causal SDPA, GELU MLP, layer
    norm, cross-entropy) trained over changing sequence lengths: one dynamic
    graph serves them all, with eager's losses and parameters."""
    torch.manual_seed(0)
    model, _, loss_fn = testing.transformer_lm(2, d=32, heads=2, seq=64)
    me, ml = copy.deepcopy(model), copy.deepcopy(model).to("lazy")
    oe = torch.optim.AdamW(me.parameters(), 1e-3)
    ol = torch.optim.AdamW(ml.parameters(), 1e-3)
    lengths = [8, 16, 24, 40, 13, 64]
    for t in lengths:
        ids = torch.randint(0, 1000, (2, t))
        losses = []
        for m, o, dev in ((me, oe, "cpu"), (ml, ol, "lazy")):
            o.zero_grad(set_to_none=True)
            loss = loss_fn(m, (ids.to(dev), ids.to(dev)))
            loss.backward()
            o.step()
            if dev == "lazy":
                lazymlir.mark_step()
            losses.append(loss.item())
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(ml.named_parameters(), me.parameters()):
        p, q = p.detach().cpu(), q.detach()
        if name.endswith("qkv.bias"):
            # The key bias's gradient is zero in exact arithmetic (softmax
            # ignores a shift per query): AdamW moves it by about lr a step
            # in the direction of float noise, eager's and ours alike.
            d = p.numel() // 3
            torch.testing.assert_close(p[d : 2 * d], q[d : 2 * d], rtol=0, atol=2e-3 * len(lengths))
            p, q = torch.cat([p[:d], p[2 * d :]]), torch.cat([q[:d], q[2 * d :]])
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4)
    c = counts()
    # The first length static (the first step's graph is the next steps'),
    # then one dynamic graph.
    assert (c["UncachedCompile"], c["DynamicCompile"], c["DynamicGraphHit"]) == (2, 1, 4), c
    assert c["DynamicCompileFallback"] == 0 and c["CompileFallback"] == 0 and c["DynamicValidationMismatch"] == 0


def test_cumsum_and_embedding_backward_over_dynamic_lengths():
    # TMTensor scan and scatter-add (lazymlir-lower-tm-tensor) with ? sizes.
    emb = nn.Embedding(50, 8)
    lazy = copy.deepcopy(emb).to("lazy")
    for t in [5, 6, 11]:
        ids = torch.randint(0, 50, (t,))
        for m, dev in ((emb, "cpu"), (lazy, "lazy")):
            m.zero_grad()
            out = m(ids.to(dev)).cumsum(0)
            out.sum().backward()
        torch.testing.assert_close(lazy.weight.grad.cpu(), emb.weight.grad)
        torch.testing.assert_close(lazy(ids.to("lazy")).cumsum(0).cpu(), emb(ids).cumsum(0))
    assert counts()["DynamicCompile"] >= 1
    assert counts()["DynamicCompileFallback"] == 0


def test_a_pass_that_cannot_take_the_dynamic_dimension_compiles_static():
    # Sorting along a ? dimension is refused by the backend with a
    # diagnostic: that trace compiles static (counted), values stay right.
    for n in [5, 6, 7]:
        x = torch.randn(3, n)
        got = torch.sort(x.to("lazy"), dim=1)
        torch.testing.assert_close(got.values.cpu(), torch.sort(x, dim=1).values)
    c = counts()
    assert c["DynamicCompileFallback"] == 1
    assert c["DynamicCompile"] == 0
    assert c["CompileFallback"] == 0


def test_instances_are_checked_against_the_compiled_output_sizes():
    """A dynamic graph writes the outputs it computes into the buffers the
    runtime allocated from the trace: an instance whose output shapes are
    not the compiled graph's (here: a template corrupted on purpose) is
    refused and compiled static, never run."""
    from lazymlir.trace import dynamic

    for b in [2, 3]:
        (torch.randn(b, 4).to("lazy") * 2).cpu()
    (template,) = [t for f in dynamic._families.values() for t in f.templates]
    assert template.output_sizes is not None
    template.output_sizes = [[7, 4]]
    x = torch.randn(5, 4)
    torch.testing.assert_close((x.to("lazy") * 2).cpu(), x * 2)
    assert metrics.counter_value("DynamicOutputShapeMismatch") == 1
    assert counts()["DynamicGraphHit"] == 0


def test_integers_that_are_not_sizes():
    # x ** k: k changes with no input size, so it may become a free symbol;
    # values below 2 (here -1, 0) are never symbols: those traces compile
    # static, and every result is eager's.
    x = torch.rand(6) + 0.5
    xl = x.to("lazy")
    for k in [2, 3, -1, 4, 0, 5]:
        torch.testing.assert_close((xl**k).cpu(), x**k)
    assert counts()["CompileFallback"] == 0


def test_a_specialized_symbol_is_guarded():
    """The decomposition of pow turns an exponent of 3 into x*x*x under the
    guard s == 3. Made symbolic on purpose (the schema check would keep it
    static), the guard must hold the dynamic graph to 3."""
    from lazymlir.trace import dynamic

    x = torch.rand(6) + 0.5
    xl = x.to("lazy")
    capable = dynamic._symbolic_capable
    dynamic._symbolic_capable = lambda graph: set(range(10_000))
    try:
        for k in [2, 3, 4, 5]:
            torch.testing.assert_close((xl**k).cpu(), x**k)
    finally:
        dynamic._symbolic_capable = capable
    assert counts()["DynamicCompile"] == 1
    assert counts()["DynamicGraphHit"] == 0


def test_a_view_merging_two_dynamic_dimensions():
    """A 3-D linear views [B, T, 64] as [B * T, 64]. torch-mlir lowers that
    view, with B and T both ``?``, as a cast asserting T == 1 (wrong for
    every other size); lazymlir lowers such merges as collapses, so batch
    and length may both change on one dynamic graph, training included."""
    torch.manual_seed(0)
    lin = nn.Sequential(nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 8))
    lazy = copy.deepcopy(lin).to("lazy")
    for b, t in [(2, 3), (4, 5), (3, 7), (5, 2), (6, 11)]:
        x = torch.randn(b, t, 64)
        out = lazy(x.to("lazy"))
        out.sum().backward()
        lin(x).sum().backward()
        torch.testing.assert_close(out.cpu(), lin(x), rtol=1e-5, atol=1e-5)
        for p, q in zip(lazy.parameters(), lin.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-4)
    c = counts()
    assert c["DynamicCompileFallback"] == 0 and c["CompileFallback"] == 0 and c["DynamicValidationMismatch"] == 0
    # One graph per size (the read of `out` computes the backward's gradients
    # with it): the first two compile static, the third dynamic, the last two hit.
    assert c["DynamicCompile"] == 1 and c["DynamicGraphHit"] >= 2, c


def test_a_cast_of_a_dynamic_dimension_compiles_static():
    """A view that splits and merges at once ([B, T, 64] -> [B * T * 2, 32])
    still gets torch-mlir's cast of a ``?`` size to a static one: such a
    graph is refused dynamic (DynamicCompileFallback) and compiles static,
    with the right values. Only T changing stays dynamic."""

    def f(x):
        return (x.reshape(-1, 32) * 2).sum(1)

    with torch.no_grad():
        for b, t in [(2, 3), (4, 5), (3, 7)]:
            x = torch.randn(b, t, 64)
            torch.testing.assert_close(f(x.to("lazy")).cpu(), f(x), rtol=1e-5, atol=1e-5)
        assert counts()["DynamicCompileFallback"] == 1 and counts()["DynamicGraphHit"] == 0
        for t in [9, 10, 11]:
            x = torch.randn(3, t, 64)
            torch.testing.assert_close(f(x.to("lazy")).cpu(), f(x), rtol=1e-5, atol=1e-5)
    assert counts()["DynamicCompile"] == 1


class _Embed(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.e = nn.Embedding(50, 8)
        self.out = nn.Linear(8, 4)

    def forward(self, ids):
        return self.out(self.e(ids)).pow(2).sum() * 0.01


def _train_embedding(sizes):
    eager = _Embed()
    lazy = copy.deepcopy(eager).to("lazy")
    for b, t in sizes:
        ids = torch.randint(0, 50, (b, t))
        for m in (eager, lazy):
            m.zero_grad()
        loss = lazy(ids.to("lazy"))
        loss.backward()
        lazymlir.mark_step()
        eager(ids).backward()
        torch.testing.assert_close(loss.cpu(), eager(ids))
        for p, q in zip(lazy.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-6)


def test_embedding_backward_with_batch_and_length_dynamic():
    """Embedding's backward is an index_put with a [B, T] index: torch-mlir
    lowers it, with B and T both ``?``, as if T were 1 (every gradient
    row wrong); lazymlir flattens the index first. Sizes where B * T stays
    equal by chance (4 x 16, 2 x 32) fit a template that a later size
    refits once."""
    _train_embedding([(4, 16), (2, 32), (3, 48), (4, 24), (2, 64), (5, 7)])
    c = counts()
    assert c["DynamicCompileFallback"] == 0 and c["CompileFallback"] == 0 and c["DynamicValidationMismatch"] == 0
    assert c["UncachedCompile"] == 3 and c["DynamicCompile"] == 2 and c["DynamicGraphHit"] >= 3


def test_a_wrong_dynamic_graph_is_caught_on_its_first_run(monkeypatch):
    """The safety net for lowerings that assume a ``?`` size: a dynamic
    graph's first run is compared with eager. Without lazymlir's index
    flattening, torch-mlir's embedding backward is wrong; the first run
    then returns eager's values, warns, runs eagerly from then on, and
    later sizes compile static."""
    from lazymlir.lowering import linalg

    monkeypatch.setattr(linalg, "_flatten_index_put_indices", lambda gm: None)
    with pytest.warns(RuntimeWarning, match="unlike eager on its first run"):
        _train_embedding([(4, 16), (2, 32), (3, 48), (5, 7)])
    c = counts()
    assert c["DynamicValidationMismatch"] == 1 and c["DynamicCompile"] == 1
    assert c["DynamicGraphHit"] == 0 and c["UncachedCompile"] == 4


@pytest.mark.parametrize("channels_last", [False, True])
def test_cnn_training_over_batch_sizes(native_built, channels_last):
    """The MNIST CNN and a ResNet BasicBlock (batch norm, channels_last too)
    trained over ragged batches: one dynamic graph from batches 3 and 4 serves
    batches past 16 as well (FakeTensor's convolution guarded the batch to
    < 16 when choosing eager's layout), with eager's losses."""
    for make in (
        lambda: testing.MnistNet().eval(),
        lambda: nn.Sequential(testing.BasicBlock(8), nn.Flatten(), nn.Linear(8 * 10 * 10, 10), nn.LogSoftmax(1)),
    ):
        lazymlir.cache.clear()
        metrics.reset()
        torch.manual_seed(0)
        m = make()
        shape = (1, 28, 28) if isinstance(m, testing.MnistNet) else (8, 10, 10)
        me, ml = copy.deepcopy(m), copy.deepcopy(m).to("lazy")
        oe, ol = torch.optim.SGD(me.parameters(), 1e-2), torch.optim.SGD(ml.parameters(), 1e-2)
        for b in [2, 3, 4, 20, 7, 33]:
            x, y = torch.randn(b, *shape), torch.randint(0, 10, (b,))
            if channels_last:
                x = x.to(memory_format=torch.channels_last)
            le = testing.train_step(me, oe, x, y, "cpu")
            ll = testing.train_step(ml, ol, x, y, "lazy")
            torch.testing.assert_close(ll.item(), le.item(), rtol=1e-4, atol=1e-5)
        c = counts()
        # Batch 2 compiles static, 3 the dynamic graph (the first step's graph
        # is the steady one: parameters moved to the device are device data);
        # 4, 20, 7 and 33 run it.
        assert (c["UncachedCompile"], c["DynamicCompile"], c["DynamicGraphHit"]) == (2, 1, 4), c
        assert c["DynamicValidationMismatch"] == 0 and c["CompileFallback"] == 0


_RAGGED_SCRIPT = r"""
import json, sys, torch
import lazymlir
from lazymlir import metrics, testing
torch.manual_seed(0)
model = testing.MnistNet().eval().to("lazy")
opt = torch.optim.SGD(model.parameters(), 1e-2)
for b in json.loads(sys.argv[1]):
    testing.train_step(model, opt, torch.randn(b, 1, 28, 28), torch.randint(0, 10, (b,)), "lazy").item()
print(json.dumps({k: metrics.counter_value(k) for k in
                  ("UncachedCompile", "DynamicCompile", "DynamicGraphHit", "DiskCacheHit")}))
"""


@pytest.mark.slow
def test_a_later_process_runs_the_static_graph_of_a_size_seen_before(tmp_path):
    """`make demo` trains with a ragged last batch, so the disk cache holds a
    dynamic graph next to the static one of batch 64: a later process
    training at batch 64 runs the static graph (found first), the dynamic one
    only at sizes without a static graph of their own (it ran the dynamic
    graph at every size, its convolutions then 20x slower)."""

    def run(sizes):
        return _fresh_process(_RAGGED_SCRIPT, tmp_path, sizes)

    first = run([16, 16, 16, 5])  # the step, the ragged batch's dynamic graph
    assert (first["UncachedCompile"], first["DynamicCompile"]) == (2, 1)
    later = run([16, 16, 16, 16])
    assert later["DynamicGraphHit"] == 0 and later["DynamicCompile"] == 0
    assert later["DiskCacheHit"] == 1  # the static graph
    ragged = run([16, 16, 9])
    assert ragged["DynamicGraphHit"] == 1 and ragged["DynamicCompile"] == 0  # the dynamic graph from disk


def test_a_size_that_keeps_coming_back_gets_its_static_graph():
    """A dynamic graph serves every size, but static code is faster: after
    config.static_tier_up_runs runs at one size, that size's static graph is
    compiled in the background and its later runs use it (with eager's
    values); other sizes stay on the dynamic graph."""
    m = mlp()
    me, ml = copy.deepcopy(m), copy.deepcopy(m).to("lazy")
    oe, ol = torch.optim.SGD(me.parameters(), 1e-2), torch.optim.SGD(ml.parameters(), 1e-2)
    torch.manual_seed(1)

    def step(b):
        x, y = torch.randn(b, 64), torch.randint(0, 10, (b,))
        le = testing.train_step(me, oe, x, y, "cpu")
        ll = testing.train_step(ml, ol, x, y, "lazy")
        torch.testing.assert_close(ll.item(), le.item(), rtol=1e-5, atol=1e-5)

    with config.patch(static_tier_up_runs=3):
        for b in [4, 5, 6, 7, 7, 7]:
            step(b)
        lazymlir.cache.wait_background_compiles()
        assert metrics.counter_value("StaticTierUp") == 1 and metrics.counter_value("StaticTierUpFailed") == 0
        runs = metrics.counter_value("DynamicGraphRun")
        step(7)
        assert metrics.counter_value("DynamicGraphRun") == runs  # the static graph ran
        step(9)  # a new size: the dynamic graph
        assert metrics.counter_value("DynamicGraphRun") == runs + 1
    assert counts()["UncachedCompile"] == 2 and counts()["DynamicCompile"] == 1
