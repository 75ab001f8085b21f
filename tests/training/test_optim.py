"""Lazy L2 on embedding rows against dense weight decay."""

import pytest
import torch
from torch import nn

from promokit.training import LazyWeightDecay, TrainConfig, Trainer, make_optimizers
from promokit.training.trainer import CHECKPOINT


class TwoTables(nn.Module):
    """Two embedding tables (one looked up twice per row) into a non-linear head, so a row's gradient
    depends on its value: the lazy catch-up must happen before the forward pass to match dense decay."""

    def __init__(self, sparse: bool):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Embedding(12, 3, sparse=sparse)
        self.b = nn.Embedding(7, 3, sparse=sparse)
        self.head = nn.Linear(3, 1)

    def forward(self, batch):
        hidden = torch.tanh(self.a(batch["cat"][:, 0]) + self.a(batch["cat"][:, 1]) * self.b(batch["cat"][:, 2]))
        return {"p": torch.sigmoid(self.head(hidden).squeeze(1))}

    def loss(self, out, batch):
        value = nn.functional.binary_cross_entropy(out["p"], batch["y"])
        return value, {"y": value.detach()}


def _data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    # rows 10, 11 of table a are never looked up: dense decay still shrinks them
    cat = torch.stack([torch.randint(0, 6, (n,), generator=g), torch.randint(4, 10, (n,), generator=g),
                       torch.randint(0, 7, (n,), generator=g)], dim=1)
    return {"cat": cat, "y": (torch.rand(n, generator=g) < 0.4).float()}


def _sgd_steps(sparse: bool, steps: int = 40, lr: float = 0.3, decay: float = 0.5):
    model = TwoTables(sparse)
    tables = [model.a, model.b]
    head = torch.optim.SGD(model.head.parameters(), lr=lr)
    sgd = torch.optim.SGD([m.weight for m in tables], lr=lr)
    opt = LazyWeightDecay(sgd, tables, decay) if sparse else sgd
    data = _data()
    for step in range(steps):
        batch = {k: v[(step * 8) % 64:(step * 8) % 64 + 8] for k, v in data.items()}  # each batch touches few rows
        loss, _ = model.loss(model(batch), batch)
        opt.zero_grad()
        head.zero_grad()
        loss.backward()
        opt.step()
        head.step()
        if not sparse:  # the dense reference: every row of every table shrinks after every update
            with torch.no_grad():
                for m in tables:
                    m.weight.mul_(1 - lr * decay)
    if sparse:
        opt.flush()
        opt.remove_hooks()
    return model


def test_lazy_decay_with_sgd_reproduces_dense_decay_after_each_update():
    dense, lazy = _sgd_steps(sparse=False), _sgd_steps(sparse=True)
    for name in ("a.weight", "b.weight", "head.weight"):
        torch.testing.assert_close(lazy.state_dict()[name], dense.state_dict()[name], rtol=1e-5, atol=1e-6)
    # untouched rows decayed by (1 − lr·λ)^steps, as under dense decay
    start = TwoTables(sparse=False).a.weight[10:]
    torch.testing.assert_close(lazy.a.weight[10:], start * (1 - 0.3 * 0.5) ** 40)


def test_lazy_decay_off_is_plain_sparse_adam_and_on_shrinks_tables():
    assert type(make_optimizers(TwoTables(True), lr=0.01)[0]).__name__ == "SparseAdam"
    assert isinstance(make_optimizers(TwoTables(True), lr=0.01, embedding_decay=1.0)[0], LazyWeightDecay)
    norms = {}
    for decay in (0.0, 5.0):
        model = TwoTables(True)
        Trainer(TrainConfig(epochs=3, batch_size=8, lr=0.05, embedding_decay=decay, progress=False)).fit(
            model, _data(), _data(32, 1))
        norms[decay] = model.a.weight.norm().item()
        assert not model.a._forward_pre_hooks  # the trainer removes its hooks
    assert norms[5.0] < 0.7 * norms[0.0]


def test_lazy_decay_resumes_exactly(tmp_path):
    config = TrainConfig(epochs=3, batch_size=8, lr=0.05, embedding_decay=2.0, progress=False, patience=5)
    full = TwoTables(True)
    Trainer(config, tmp_path / "a").fit(full, _data(), _data(32, 1))

    part = TwoTables(True)
    Trainer(TrainConfig(**{**config.to_dict(), "epochs": 2}), tmp_path / "b").fit(part, _data(), _data(32, 1))
    assert (tmp_path / "b" / CHECKPOINT).exists()
    resumed = TwoTables(True)
    Trainer(config, tmp_path / "b").fit(resumed, _data(), _data(32, 1), resume=True)
    for name, value in full.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], value)


def test_negative_decay_is_refused():
    model = TwoTables(True)
    with pytest.raises(ValueError, match="weight_decay"):
        LazyWeightDecay(torch.optim.SGD([model.a.weight], lr=0.1), [model.a], -1.0)
