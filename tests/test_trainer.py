import pytest
import torch
from torch import nn

from promokit.nn import binary_log_loss
from promokit.training import TrainConfig, Trainer, make_optimizers
from promokit.training.trainer import CHECKPOINT


class Logistic(nn.Module):
    """The smallest model that honours the trainer's contract."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 1, sparse=True)
        self.linear = nn.Linear(2, 1)

    def forward(self, batch):
        logit = self.emb(batch["cat"][:, 0]).squeeze(1) + self.linear(batch["num"]).squeeze(1)
        return {"p": torch.sigmoid(logit)}

    def loss(self, out, batch):
        value = binary_log_loss(out["p"], batch["y"])
        return value, {"y": value.detach()}


def _data(n=2000, seed=0):
    g = torch.Generator().manual_seed(seed)
    cat = torch.randint(0, 10, (n, 1), generator=g)
    num = torch.randn(n, 2, generator=g)
    logit = (cat[:, 0].float() - 4.5) / 2 + num[:, 0]
    y = (torch.rand(n, generator=g) < torch.sigmoid(logit)).float()
    return {"cat": cat, "num": num, "y": y}


def _fit(config, **kwargs):
    torch.manual_seed(0)
    model = Logistic()
    history = Trainer(config, kwargs.pop("checkpoint_dir", None)).fit(model, _data(), _data(500, 1), **kwargs)
    return model, history


def test_optimizers_split_sparse_and_dense_parameters():
    optimizers = make_optimizers(Logistic(), lr=0.01)
    assert [type(o).__name__ for o in optimizers] == ["SparseAdam", "Adam"]


def test_trainer_learns_and_restores_best_epoch():
    model, history = _fit(TrainConfig(epochs=5, batch_size=100, lr=0.05, progress=False))
    assert history.epochs[-1]["train_loss"] < history.epochs[0]["train_loss"]
    assert history.best_valid_loss == min(e["valid_loss"] for e in history.epochs)
    assert Trainer(TrainConfig(progress=False)).evaluate_loss(model, _data(500, 1))[0] == pytest.approx(
        history.best_valid_loss, rel=1e-5)


def test_same_seed_same_result():
    config = TrainConfig(epochs=2, batch_size=100, lr=0.05, progress=False)
    a, _ = _fit(config)
    b, _ = _fit(config)
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb)


def test_early_stopping_stops_when_validation_stops_improving():
    _, history = _fit(TrainConfig(epochs=50, batch_size=50, lr=0.5, patience=1, progress=False))
    assert history.stopped == "early_stopping" and len(history.epochs) < 50


def test_resume_continues_exactly_where_it_stopped(tmp_path):
    full, _ = _fit(TrainConfig(epochs=4, batch_size=100, lr=0.05, progress=False, patience=10))
    _fit(TrainConfig(epochs=2, batch_size=100, lr=0.05, progress=False, patience=10), checkpoint_dir=tmp_path)
    assert (tmp_path / CHECKPOINT).exists()
    resumed, history = _fit(TrainConfig(epochs=4, batch_size=100, lr=0.05, progress=False, patience=10),
                            checkpoint_dir=tmp_path, resume=True)
    assert [e["epoch"] for e in history.epochs] == [0, 1, 2, 3]
    for pa, pb in zip(full.parameters(), resumed.parameters()):
        torch.testing.assert_close(pa, pb)


def test_interrupt_keeps_the_best_model_so_far(tmp_path):
    class Interrupting(Logistic):
        calls = 0

        def forward(self, batch):
            Interrupting.calls += 1
            if Interrupting.calls == 45:   # inside the third epoch of 20 batches (+ validation passes)
                raise KeyboardInterrupt
            return super().forward(batch)

    model = Interrupting()
    history = Trainer(TrainConfig(epochs=5, batch_size=100, lr=0.05, progress=False), tmp_path).fit(
        model, _data(), _data(500, 1))
    assert history.stopped == "interrupted" and len(history.epochs) == 2
    assert (tmp_path / CHECKPOINT).exists()
