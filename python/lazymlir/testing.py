"""Models and a training step shared by the tests, the benchmarks and the demo.

Importable without path edits (``from lazymlir.testing import MnistNet``); like
``torch.testing``, not needed by the device itself."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from .frontend.barriers import mark_step


class MnistNet(nn.Module):
    """The Lazy Tensor tutorial's MNIST network: two convolutions, max
    pooling, dropout, two linear layers, log_softmax."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock (stride 1, no downsample)."""

    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


def train_step(model, optimizer, x, y, device, loss_fn=F.nll_loss):
    """One training step as the tutorial writes it: inputs moved to
    ``device``, zero_grad, forward, loss, backward, optimizer step, and on the
    lazy device mark_step(). Returns the loss (a lazy tensor on "lazy")."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x.to(device)), y.to(device))
    loss.backward()
    optimizer.step()
    if device == "lazy":
        mark_step()
    return loss


def transformer_lm(layers, vocab=1000, d=128, heads=4, seq=64, batch=4):
    """A GPT-style torch.nn language model: token and position embeddings,
    ``layers`` pre-norm blocks (causal SDPA attention, GELU MLP of width
    4*d), a final layer norm and an LM head, cross-entropy loss. Returns
    ``(model, batch, loss)``: ``batch(device)`` draws ``(ids, labels)`` of
    shape (batch, seq) on ``device``; ``loss(model, batch)`` is the scalar
    training loss."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)

        def forward(self, ids, labels):
            t = ids.shape[1]
            x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
            for block in self.blocks:
                x = block(x)
            logits = self.head(self.ln(x))
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))

    def make_batch(device):
        ids = torch.randint(0, vocab, (batch, seq))
        return (ids.to(device), ids.to(device))

    return LM(), make_batch, lambda m, b: m(*b)


def hf_model(kind, vocab=1000, hidden=128, layers=2, heads=4, intermediate=512, seq=64, batch=4):
    """A Hugging Face ``transformers`` model built from a config with random
    weights (no download), dropout off: ``kind`` "bert"
    (BertForSequenceClassification, an encoder), "gpt2" (GPT2LMHeadModel, a
    causal decoder; its MLP is 4*hidden wide), "llama" (LlamaForCausalLM:
    grouped-query attention with half as many key/value heads; its rotary
    embedding opens torch.autocast(device_type=..., enabled=False)), "t5"
    (T5ForConditionalGeneration, ``layers`` encoder and decoder layers) or
    "vit" (ViTForImageClassification on ``seq`` x ``seq`` images, patch 4).
    Returns ``(model, batch, loss)`` like :func:`transformer_lm`."""
    import transformers

    if kind == "bert":
        cfg = transformers.BertConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=intermediate,
            max_position_embeddings=max(128, seq),
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        model = transformers.BertForSequenceClassification(cfg)

        def make_batch(device):
            return (torch.randint(0, vocab, (batch, seq)).to(device), torch.randint(0, 2, (batch,)).to(device))

        return model, make_batch, lambda m, b: m(input_ids=b[0], labels=b[1]).loss
    if kind == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=vocab,
            n_embd=hidden,
            n_layer=layers,
            n_head=heads,
            n_positions=max(128, seq),
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            use_cache=False,
        )
        model = transformers.GPT2LMHeadModel(cfg)

        def make_batch(device):
            ids = torch.randint(0, vocab, (batch, seq))
            return (ids.to(device),)

        return model, make_batch, lambda m, b: m(input_ids=b[0], labels=b[0]).loss
    if kind == "llama":
        cfg = transformers.LlamaConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=intermediate,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 2),
            max_position_embeddings=max(128, seq),
        )
        model = transformers.LlamaForCausalLM(cfg)

        def make_batch(device):
            return (torch.randint(0, vocab, (batch, seq)).to(device),)

        return model, make_batch, lambda m, b: m(input_ids=b[0], labels=b[0]).loss
    if kind == "t5":
        cfg = transformers.T5Config(
            vocab_size=vocab,
            d_model=hidden,
            d_kv=hidden // heads,
            d_ff=intermediate,
            num_layers=layers,
            num_decoder_layers=layers,
            num_heads=heads,
            dropout_rate=0.0,
            decoder_start_token_id=0,
            pad_token_id=0,
        )
        model = transformers.T5ForConditionalGeneration(cfg)

        def make_batch(device):
            return (torch.randint(1, vocab, (batch, seq)).to(device), torch.randint(1, vocab, (batch, seq)).to(device))

        return model, make_batch, lambda m, b: m(input_ids=b[0], labels=b[1]).loss
    if kind == "vit":  # ``seq``: the image side (patches of 4x4 pixels, seq**2/16 tokens + CLS)
        cfg = transformers.ViTConfig(
            image_size=seq,
            patch_size=4,
            num_channels=3,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=intermediate,
            num_labels=10,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        model = transformers.ViTForImageClassification(cfg)

        def make_batch(device):
            return (torch.randn(batch, 3, seq, seq).to(device), torch.randint(0, 10, (batch,)).to(device))

        return model, make_batch, lambda m, b: m(pixel_values=b[0], labels=b[1]).loss
    raise ValueError(f"unknown Hugging Face model kind {kind!r}: bert, gpt2, llama, t5 or vit")
