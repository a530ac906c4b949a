"""Shared fixtures for the lazy-device tests: seeding, clean metrics, and the
check that a test's work was compiled rather than run eagerly."""

import os
import random
import tempfile

import pytest
import torch

import lazymlir
from lazymlir import metrics


# The persistent compile cache of the test session: its own directory (child
# processes inherit it), not the user's, unless LAZYMLIR_CACHE_DIR says where.
if "LAZYMLIR_CACHE_DIR" not in os.environ:
    _session_cache = tempfile.TemporaryDirectory(prefix="lazymlir-test-cache-")
    os.environ["LAZYMLIR_CACHE_DIR"] = _session_cache.name
    lazymlir.config.cache_dir = _session_cache.name

# The native compiler comes from the C++ build.
HAVE_NATIVE = lazymlir.execution.entries.native_compiler() is not None


@pytest.fixture(autouse=True)
def _seed_and_reset():
    random.seed(0)
    torch.manual_seed(0)
    lazymlir.mark_step()  # nothing pending from an earlier test
    metrics.reset()
    # Each test's graphs generalize to dynamic ones from its own traces only:
    # a test that compiles a graph for batch 2 after another test's batch 1
    # gets a static graph (compiled graphs stay cached, by exact trace).
    lazymlir.trace.dynamic.clear()
    yield


@pytest.fixture
def fresh_cache():
    lazymlir.cache.clear()
    yield lazymlir.cache
    lazymlir.cache.clear()


@pytest.fixture
def native_built():
    """For tests that prove work was compiled: the native compiler must be built
    (a missing build is a failure, not a skip)."""
    assert HAVE_NATIVE, "lazymlir.execution.native / lazymlir._native is not importable: build with `make`"


def assert_compiled(*allowed_fallbacks):
    """The graphs ran compiled: something compiled (or hit the cache), no graph
    fell back to eager, and no op ran eagerly except ``allowed_fallbacks``."""
    compiled = metrics.counter_value("UncachedCompile") + metrics.counter_value("CachedCompile")
    assert compiled > 0, metrics.metrics_report()
    assert metrics.counter_value("CompileFallback") == 0, metrics.metrics_report()
    assert metrics.counter_value("EagerGraph") == 0, metrics.metrics_report()
    assert sorted(metrics.executed_fallback_ops()) == sorted(allowed_fallbacks), metrics.metrics_report()


def hf_model(name, llama_hidden=128):
    """(model, loss(model, ids)) of a small Hugging Face model with random
    weights (no download) for training tests: BERT (sequence
    classification), GPT-2 (LM head) or LLaMA (grouped-query attention: 4
    heads, 2 key/value heads; its rotary embedding opens
    torch.autocast(device_type="lazy", enabled=False), which needs the lazy
    device to be a device autocast knows). Dropout off."""
    transformers = pytest.importorskip("transformers")
    if name == "bert":
        cfg = transformers.BertConfig(
            vocab_size=100,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=32,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        return transformers.BertForSequenceClassification(
            cfg
        ), lambda m, ids: m(input_ids=ids, labels=ids[:, 0] % 2).loss
    if name == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=100,
            n_embd=32,
            n_layer=2,
            n_head=2,
            n_positions=32,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            use_cache=False,
        )
        return transformers.GPT2LMHeadModel(cfg), lambda m, ids: m(input_ids=ids, labels=ids).loss
    assert name == "llama", name
    cfg = transformers.LlamaConfig(
        vocab_size=100,
        hidden_size=llama_hidden,
        intermediate_size=2 * llama_hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(cfg), lambda m, ids: m(input_ids=ids, labels=ids).loss
