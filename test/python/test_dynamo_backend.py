"""Issue 31, part 2: ``torch.compile(model, backend="lazymlir")``: Dynamo's
graphs through AOTAutograd into the lazy device's compiler, results equal
eager's, work compiled (metrics), ops that do not lower run eagerly, symbolic
sizes compile once, Hugging Face models train and generate."""

import copy
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F
from conftest import hf_model

import lazymlir
from lazymlir import metrics
from lazymlir.dynamo import backend
from lazymlir.testing import MnistNet


@pytest.fixture(autouse=True)
def _dynamo_reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _assert_regions_compiled():
    assert metrics.counter_value("DynamoGraph") > 0, metrics.metrics_report()
    assert metrics.counter_value("DynamoRegion") > 0, metrics.metrics_report()
    assert metrics.counter_value("CompileFallback") == 0, metrics.metrics_report()


def test_registered_as_a_dynamo_backend():
    assert "lazymlir" in torch._dynamo.list_backends()
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="torch_dynamo_backends") if e.name == "lazymlir"]
    assert ep.load() is backend.lazymlir


def test_mlp_inference_and_training_equal_eager(native_built, fresh_cache):
    model = _mlp()
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend="lazymlir")
    x = torch.randn(8, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    model(x).square().sum().backward()
    compiled(x).square().sum().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad)
    _assert_regions_compiled()
    # Only views run outside the compiled regions (the transposed weights
    # the backward takes).
    assert metrics.counter_value("DynamoEagerOp") == 0, metrics.metrics_report()


def test_returned_views_alias_what_they_view(native_built, fresh_cache):
    def f(a, b):
        return (a @ b.t()).softmax(-1), b.t(), (a * 2)[1:]

    a, b = torch.randn(5, 7), torch.randn(3, 7)
    got = torch.compile(f, backend="lazymlir")(a, b)
    for g, e in zip(got, f(a, b)):
        torch.testing.assert_close(g, e)
    assert got[1]._base is b and got[1].stride() == (1, 7)
    _assert_regions_compiled()


def _train_like_eager(model, optimizer, options, batch, loss_fn, steps=3, atol=1e-5):
    """``steps`` training steps of ``model`` eagerly and of a copy through
    torch.compile(backend="lazymlir"), on the same batches and random
    streams: the same losses and parameters. Returns (copy, compiled)."""
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend="lazymlir")
    opts = [optimizer(m.parameters(), **options) for m in (model, twin)]
    for step in range(steps):
        b = batch()
        losses = []
        for m, opt in ((model, opts[0]), (compiled, opts[1])):
            torch.manual_seed(step)
            opt.zero_grad()
            loss = loss_fn(m, b)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) < 1e-4, (step, losses)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=atol)
    _assert_regions_compiled()
    return twin, compiled


def test_mnist_cnn_trains_like_eager(native_built, fresh_cache):
    """Dropout included: random ops run eagerly, on eager's random stream."""
    model = MnistNet()
    twin, compiled = _train_like_eager(
        model,
        torch.optim.Adadelta,
        dict(lr=1.0),
        lambda: (torch.randn(4, 1, 28, 28), torch.randint(0, 10, (4,))),
        lambda m, b: F.nll_loss(m(b[0]), b[1]),
    )
    with torch.no_grad():
        model.eval(), twin.eval()
        x = torch.randn(2, 1, 28, 28)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_hf_model_trains_like_eager(native_built, fresh_cache, name):
    model, make_batch, loss_fn = hf_model(name, llama_hidden=64)
    # AdamW's normalized update moves an element whose gradient is near zero
    # (7e-9 against a median of 3e-3) by ~1e-5 for a float32 rounding of it
    # (6e-5 on an AVX2 host, GPT-2's element (20, 31): eager's own kernels
    # round differently there); a wrong update is off by ~lr = 1e-3.
    _train_like_eager(model, torch.optim.AdamW, dict(lr=1e-3), lambda: make_batch("cpu"), loss_fn, atol=1e-4)


def test_symbolic_sizes_compile_once(native_built, fresh_cache):
    model = _mlp()
    compiled = torch.compile(model, backend="lazymlir", dynamic=True)
    with torch.no_grad():
        for batch in (3, 5, 8, 13):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(compiled(x), model(x))
            if batch == 3:
                compiles = metrics.counter_value("UncachedCompile")
    assert metrics.counter_value("DynamoDynamicRegion") == 1, metrics.metrics_report()
    assert metrics.counter_value("UncachedCompile") == compiles, metrics.metrics_report()
    _assert_regions_compiled()


def test_an_op_that_does_not_lower_runs_eagerly(native_built, fresh_cache):
    # logcumsumexp's lowering overflows where eager does not: refused, it
    # runs eagerly between two compiled regions.
    def f(x):
        return torch.logcumsumexp(x.exp() + 1, dim=1).sin() * 2

    x = torch.randn(4, 6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(f, backend="lazymlir")(x)
    torch.testing.assert_close(got, f(x))
    assert any("logcumsumexp" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert metrics.counter_value("DynamoEagerOp") == 1, metrics.metrics_report()
    assert metrics.counter_value("DynamoRegion") == 2, metrics.metrics_report()
    _assert_regions_compiled()


def test_generate_greedy_equals_eager(native_built, fresh_cache):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=100, n_embd=64, n_layer=2, n_head=2, n_positions=128)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 100, (2, 6))
    with torch.no_grad():
        expected = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)
        model.forward = torch.compile(model.forward, backend="lazymlir")
        got = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(got, expected)
    # The decode step's cache length is a symbol: one region serves every token.
    assert metrics.counter_value("DynamoDynamicRegion") >= 1, metrics.metrics_report()
    _assert_regions_compiled()


def test_compiled_model_on_the_lazy_device_runs_like_eager(native_built, fresh_cache):
    """torch.compile over lazy-device tensors: PyTorch's fake tensors refuse the
    "lazy" device type, so Dynamo runs each frame as Python and the lazy
    device records it. Dynamo tracing lazymlir's own op handlers on the way
    crashed (an AssertionError about no_dispatch()); lazymlir is in Dynamo's
    skip list now, lazymlir.testing's models excepted."""
    transformers = pytest.importorskip("transformers")
    from torch._dynamo import trace_rules

    from lazymlir import testing
    from lazymlir.frontend import special

    assert trace_rules.check_file(special.__file__).skipped
    assert not trace_rules.check_file(testing.__file__).skipped

    cfg = transformers.GPT2Config(vocab_size=100, n_embd=64, n_layer=2, n_head=2, n_positions=128)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 100, (2, 6))
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        expected = model.generate(ids, **kw)
        model.to("lazy")
        model.forward = torch.compile(model.forward, backend="lazymlir")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Dynamo's per-frame "meta converter nyi"
            got = model.generate(ids.to("lazy"), **kw)
    assert torch.equal(got.cpu(), expected)
    assert metrics.counter_value("UncachedCompile") > 0, metrics.metrics_report()
    assert metrics.counter_value("CompileFallback") == 0, metrics.metrics_report()


def test_profiled_runs_name_the_regions(native_built, fresh_cache):
    compiled = torch.compile(_mlp(), backend="lazymlir")
    x = torch.randn(8, 16)
    with torch.no_grad():
        compiled(x)
        with lazymlir.profile() as prof:
            compiled(x)
    assert [run[0] for run in prof.graph_runs] and all(run[0].startswith("dynamo-") for run in prof.graph_runs)


@pytest.mark.slow
def test_a_second_process_loads_regions_from_disk(native_built, tmp_path):
    script = textwrap.dedent("""
        import torch, lazymlir
        from lazymlir import metrics
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
        out = torch.compile(model, backend="lazymlir")(torch.randn(8, 16))
        out.sum().backward()
        print("RESULT", metrics.counter_value("DynamoRegion"), metrics.counter_value("DynamoRecordHit"))
    """)
    env = dict(os.environ, LAZYMLIR_CACHE_DIR=str(tmp_path))
    results = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "nanobind: leaked" not in done.stderr, done.stderr[-3000:]
        results.append([int(v) for v in done.stdout.split("RESULT")[1].split()])
    (regions, hits_first), (regions_again, hits_second) = results
    assert regions == regions_again >= 2 and hits_first == 0 and hits_second == regions


def test_background_lowering_leaves_fx_tracing_flag_alone(native_built):
    """The lazy device lowers static tier-ups on a background thread: its
    make_fx must not set torch.fx's process-wide tracing flag, which makes
    every torch.compile'd function on other threads run uncompiled (and
    could be left set for good by interleaved traces)."""
    import threading

    import torch.fx._symbolic_trace as symbolic_trace
    from lazymlir.lowering import linalg

    # Dynamo's first compile wraps Tracer.trace (torch._dynamo.disable): the
    # private copy is of the function under the wrapper.
    torch.compile(lambda x: x + 1, backend="lazymlir")(torch.randn(2))
    gm = torch.fx.symbolic_trace(lambda x: (x.sin() * 2,))
    seen = set()
    done = threading.Event()

    errors = []

    def lower_in_background():
        try:
            with linalg.private_fx_tracing():
                for _ in range(3):
                    linalg.lower(gm, [torch.randn(64, 64)])
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        finally:
            done.set()

    worker = threading.Thread(target=lower_in_background)
    worker.start()
    while not done.wait(0.0005):  # checks the flag while the lowering runs, yielding the GIL between
        seen.add(symbolic_trace.is_fx_tracing())
    worker.join(timeout=300)
    assert not worker.is_alive(), "the background lowering never finished"
    assert not errors, errors
    assert seen == {False} and not symbolic_trace.is_fx_tracing()
    linalg.lower(gm, [torch.randn(8)])  # the main thread's tracing is unchanged
