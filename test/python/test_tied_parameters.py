"""Module.to("lazy") keeps tied parameters tied (GPT-2's token embedding and
LM head): a lazy tensor is a wrapper subclass, for which torch's
Module._apply made a new Parameter per module, so each copy got only its own
module's gradient and the model trained untied, silently."""

import copy

import torch
from conftest import assert_compiled


class TiedLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8)
        self.head = torch.nn.Linear(8, 50, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(self.emb(ids).tanh())


def test_to_lazy_and_back_keeps_ties():
    m = TiedLM().to("lazy")
    assert m.head.weight is m.emb.weight
    assert len(list(m.parameters())) == 1
    m = m.to("cpu")
    assert m.head.weight is m.emb.weight and m.head.weight.device.type == "cpu"


def test_tied_training_matches_eager(native_built):
    torch.manual_seed(0)
    ref = TiedLM()
    lazy = copy.deepcopy(ref).to("lazy")
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (ref, lazy)]
    for _ in range(3):
        ids, target = torch.randint(0, 50, (4, 6)), torch.randint(0, 50, (4, 6))
        for m, opt, dev in ((ref, opts[0], "cpu"), (lazy, opts[1], "lazy")):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(ids.to(dev)).reshape(-1, 50), target.to(dev).reshape(-1))
            loss.backward()
            opt.step()
    torch.testing.assert_close(lazy.emb.weight.cpu(), ref.emb.weight, rtol=1e-5, atol=1e-6)
    assert_compiled()
