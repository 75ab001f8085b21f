import pytest
import torch
from torch import nn

from promokit.nn import binary_log_loss
from promokit.training import TrainConfig, Trainer, auc_metric, make_optimizers
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
    assert history.best_score == min(e["valid_loss"] for e in history.epochs)
    assert Trainer(TrainConfig(progress=False)).evaluate_loss(model, _data(500, 1))[0] == pytest.approx(
        history.best_score, rel=1e-5)


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


def test_resume_without_a_checkpoint_says_so_and_starts_at_epoch_one(tmp_path):
    config = TrainConfig(epochs=2, batch_size=100, lr=0.05, progress=False, patience=10)
    fresh, _ = _fit(config)
    with pytest.warns(UserWarning, match=rf"^resume: no checkpoint in {tmp_path}; training starts at epoch 1$"):
        resumed, history = _fit(config, checkpoint_dir=tmp_path, resume=True)
    assert [e["epoch"] for e in history.epochs] == [0, 1]
    for pa, pb in zip(fresh.parameters(), resumed.parameters()):
        torch.testing.assert_close(pa, pb)
    with pytest.warns(UserWarning, match=r"^resume: no checkpoint without a checkpoint_dir; training starts"):
        _fit(config, resume=True)


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


def _scripted(values):
    """A validation metric returning ``values`` epoch after epoch, whatever the model does."""
    calls = iter(values)
    return lambda outputs, batch: next(calls)


def test_monitored_metric_picks_the_kept_epoch_and_is_recorded():
    config = TrainConfig(epochs=4, batch_size=100, lr=0.05, patience=10, progress=False, monitor="score")
    model, history = _fit(config, metrics={"score": _scripted([0.1, 0.9, 0.3, 0.2])})
    assert history.best_epoch == 1 and history.best_score == 0.9 and history.monitor == "score"
    assert [e["valid_score"] for e in history.epochs] == [0.1, 0.9, 0.3, 0.2]
    two_epochs, _ = _fit(TrainConfig(**{**config.to_dict(), "epochs": 2}), metrics={"score": _scripted([0.0, 1.0])})
    for pa, pb in zip(model.parameters(), two_epochs.parameters()):
        torch.testing.assert_close(pa, pb)
    assert history.summary() == "completed after 4 epochs; best validation score 0.90000 at epoch 2"


def test_early_stopping_on_a_metric_stops_when_it_stops_rising():
    config = TrainConfig(epochs=10, batch_size=100, lr=0.05, patience=2, progress=False, monitor="score")
    _, history = _fit(config, metrics={"score": _scripted([0.5, 0.4, 0.3, 0.9])})
    assert history.stopped == "early_stopping" and len(history.epochs) == 3 and history.best_epoch == 0


def test_metrics_are_recorded_while_the_loss_is_monitored():
    _, history = _fit(TrainConfig(epochs=2, batch_size=100, lr=0.05, progress=False),
                      metrics={"mean_p": lambda outputs, batch: float(outputs["p"].mean())})
    assert history.best_score == min(e["valid_loss"] for e in history.epochs)
    assert all(0 < e["valid_mean_p"] < 1 for e in history.epochs)


def test_unknown_monitor_is_refused():
    with pytest.raises(ValueError, match="monitor 'auc' is neither 'loss' nor one of the metrics"):
        _fit(TrainConfig(epochs=1, progress=False, monitor="auc"))


def test_lr_decay_scales_each_epochs_rate():
    """Epoch e trains at lr · lr_decay**e: with a decay of 0 only the first epoch moves the weights."""
    torch.manual_seed(0)
    model, snapshots = Logistic(), []
    initial = model.linear.weight.detach().clone()
    config = TrainConfig(epochs=3, batch_size=100, lr=0.05, lr_decay=0.0, patience=5, progress=False)
    Trainer(config).fit(model, _data(), _data(500, 1),
                        on_epoch=lambda epoch, record: snapshots.append(model.linear.weight.detach().clone()))
    assert not torch.equal(snapshots[0], initial)
    assert torch.equal(snapshots[0], snapshots[1]) and torch.equal(snapshots[1], snapshots[2])


def _quiet_console(monkeypatch, interactive: bool):
    """The rich console as on a terminal (``interactive``) or as with output to a log file or a pipe."""
    import rich

    monkeypatch.setattr(rich.get_console(), "is_interactive", interactive)
    monkeypatch.setattr(rich.get_console(), "is_jupyter", False)


def test_one_line_per_epoch_when_the_output_is_not_a_terminal(monkeypatch, capsys):
    _quiet_console(monkeypatch, interactive=False)
    _, history = _fit(TrainConfig(epochs=3, patience=5, batch_size=200, progress=True),
                      metrics={"auc": _scripted([0.6, 0.7, 0.8])})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["epoch 1/3", "epoch 2/3", "epoch 3/3"]
    record = history.epochs[1]
    assert f"train_loss {record['train_loss']:.5f}, valid_loss {record['valid_loss']:.5f}" in lines[1]
    assert f"valid_auc {record['valid_auc']:.5f}" in lines[1]
    assert lines[1].endswith(f"({record['seconds']:.1f} s)")


def test_no_epoch_lines_on_a_terminal_or_without_progress(monkeypatch, capsys):
    _quiet_console(monkeypatch, interactive=False)
    _fit(TrainConfig(epochs=2, batch_size=200, progress=False))
    _quiet_console(monkeypatch, interactive=True)
    _fit(TrainConfig(epochs=2, batch_size=200, progress=True))
    assert "epoch" not in capsys.readouterr().out


#: Per epoch (train_loss, valid_auc, valid_loss, valid_y) of the run below, recorded with the trainer's own loop
#: before it became the one-process case of the loop shared with training over shards: one process must keep every
#: figure to the bit.
PINNED = [
    (0.69270068359375, 0.7856422569027611, 0.5623969435691833, 0.5623969435691833),
    (0.5782621459960937, 0.8223769507803121, 0.533555269241333, 0.533555269241333),
    (0.5561680297851562, 0.846530612244898, 0.5275914072990417, 0.5275914072990417),
    (0.5495054931640625, 0.8444497799119648, 0.5200079679489136, 0.5200079679489136),
]


def test_a_one_process_run_keeps_its_pinned_figures():
    torch.manual_seed(0)
    model = Logistic()
    config = TrainConfig(epochs=4, batch_size=128, lr=0.05, lr_decay=0.9, embedding_decay=1.0, patience=10,
                         progress=False, monitor="auc")
    history = Trainer(config).fit(model, _data(), _data(500, 1), metrics={"auc": auc_metric("p", "y")})
    assert [tuple(e[k] for k in ("train_loss", "valid_auc", "valid_loss", "valid_y")) for e in history.epochs] == PINNED
    assert history.best_epoch == 2 and history.embedding_decay == 1.0


class Penalised(Logistic):
    """A loss with a penalty on the weights, as the incentive heads have: it tracks gradients unless told not to."""

    def loss(self, out, batch):
        value, _ = super().loss(out, batch)
        penalty = self.linear.weight.square().sum()
        return value + 0.01 * penalty, {"penalty": penalty}


def test_validation_tracks_no_gradients(recwarn):
    torch.manual_seed(0)
    history = Trainer(TrainConfig(epochs=1, batch_size=500, progress=False)).fit(Penalised(), _data(), _data(500, 1))
    assert "valid_penalty" in history.epochs[0]
    assert not [w for w in recwarn if "requires_grad" in str(w.message)]
