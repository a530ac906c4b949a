"""Issue 16: Hugging Face models (random weights from small configs, no
download) train on the lazy device with every graph compiled, and the same
losses and parameters as eager; their repeated layers share kernels."""

import copy

import pytest
import torch
from conftest import assert_compiled, hf_model

import lazymlir
from lazymlir import metrics

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_hf_model_trains_compiled(native_built, fresh_cache, name):
    torch.manual_seed(0)
    model, make_batch, loss_fn = hf_model(name)
    lazy = copy.deepcopy(model).to("lazy")
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (model, lazy)]
    for step in range(3):
        batch = make_batch("cpu")
        losses = []
        for m, opt, device in ((model, opts[0], "cpu"), (lazy, opts[1], "lazy")):
            opt.zero_grad()
            loss = loss_fn(m, tuple(t.to(device) for t in batch))
            loss.backward()
            opt.step()
            if device == "lazy":
                lazymlir.mark_step()
            losses.append(float(loss))
        assert abs(losses[0] - losses[1]) < 1e-4, (step, losses)
    for p, q in zip(model.parameters(), lazy.parameters()):
        # AdamW's normalized update: float32 rounding in a gradient near zero moves an element by ~1e-5.
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=5e-5)
    if name == "llama":  # one graph a step: no barrier inside (its KV cache's cat of an empty tensor)
        assert metrics.counter_value("Sync") == 3, metrics.metrics_report()
    assert_compiled()
    # The training step's graph: two identical layers, so far fewer distinct
    # kernels than loop nests run.
    nests = metrics.sample_values("LoopNestsPerGraph")
    distinct = metrics.sample_values("DistinctKernelsPerGraph")
    big = max(range(len(nests)), key=nests.__getitem__)
    assert distinct[big] < 0.7 * nests[big], (distinct, nests)


def _gpt2_lm():
    cfg = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    return transformers.GPT2LMHeadModel(cfg).eval()


def _llama_lm():
    cfg = transformers.LlamaConfig(
        vocab_size=100,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("batch,sample", [(1, False), (4, True)], ids=["b1-greedy", "b4-sample"])
@pytest.mark.parametrize("make", [_gpt2_lm, _llama_lm], ids=["gpt2", "llama"])
def test_generate_compiles_at_most_four_graphs(native_built, fresh_cache, tmp_path, make, batch, sample, cache):
    """Issue 31: `generate` with a KV cache (growing, or the static cache's
    preallocated one written in place), greedy or sampling: tokens equal
    eager's (sampling draws from eager's random stream), and from an empty
    cache at most 4 graphs for any number of new tokens: the prefill, the
    decode step at its first size and dynamic in the cache length (the
    static cache: one more, its first decode step). The reads before each
    token (cache positions, padding checks) run eagerly, the stopping check
    cuts the whole step into one graph, and the last token's length check
    (a bool fill) is a lifted input, not a new graph. A second generate of
    another length compiles nothing (the static cache: a third; the second
    one's prefill and first step find its cache already allocated, which
    makes them other graphs). Before: 150 graphs for 48 tokens."""
    torch.manual_seed(0)
    model = make()
    ids = torch.randint(1, 100, (batch, 6))
    lazy = copy.deepcopy(model).to("lazy")
    kwargs = dict(do_sample=sample, pad_token_id=0)
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    compiled = []
    with torch.no_grad(), lazymlir.config.patch(cache_dir=str(tmp_path), static_tier_up_runs=0):
        for new in (24, 10, 16):
            torch.manual_seed(new)
            ref = model.generate(ids, max_new_tokens=new, min_new_tokens=new, **kwargs)
            before = metrics.counter_value("UncachedCompile")
            torch.manual_seed(new)
            out = lazy.generate(ids.to("lazy"), max_new_tokens=new, min_new_tokens=new, **kwargs)
            torch.testing.assert_close(out.cpu(), ref)
            lazymlir.wait_device_ops()
            compiled.append(metrics.counter_value("UncachedCompile") - before)
    assert compiled[0] <= 4 and compiled[2] == 0 and (cache == "static" or compiled[1] == 0), compiled
    assert metrics.counter_value("EagerReadGraph") > 0, metrics.metrics_report()
    assert_compiled(*(["aten::multinomial"] if sample else []))
