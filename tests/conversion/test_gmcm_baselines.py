"""The GMCM paper's Table 2 baselines (Base, Division, ResNet, DCN) and their blocks."""

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score
from torch import nn

from promokit.conversion.models.base import Base
from promokit.conversion.models.dcn import DCN
from promokit.conversion.models.division import Division
from promokit.conversion.models.resnet import ResNet
from promokit.nn import binary_log_loss
from promokit.nn.cross import CrossNetwork
from promokit.nn.residual import ResidualMLP
from promokit.training import TrainConfig, Trainer, check_model_params, make_optimizers

MODELS = [Base, Division, ResNet, DCN]
SMALL = {"emb_dim": 4, "hidden": (32, 16)}


def _data(n=3000, seed=0):
    """Field 0 (20 categories) drives click and purchase; field 1 and the numeric block are noise."""
    rng = np.random.default_rng(seed)
    driver = rng.integers(1, 21, n)
    ctr = np.where(driver % 3 == 0, 0.6, 0.3)
    cvr = np.where(driver % 2 == 0, 0.6, 0.05)
    click = rng.random(n) < ctr
    purchase = click & (rng.random(n) < cvr)
    return {"cat": torch.tensor(np.stack([driver, rng.integers(1, 11, n)], axis=1)),
            "num": torch.tensor(rng.normal(size=(n, 2)), dtype=torch.float32),
            "click": torch.tensor(click, dtype=torch.float32),
            "purchase": torch.tensor(purchase, dtype=torch.float32)}


def _model(cls, **params):
    torch.manual_seed(0)
    return cls([21, 11], 2, **{**SMALL, **params})


def test_cross_network_one_layer_by_hand():
    cross = CrossNetwork(2, layers=1)
    with torch.no_grad():
        cross.weight.copy_(torch.tensor([[0.5, -1.0]]))
        cross.bias.copy_(torch.tensor([[0.1, 0.2]]))
    x0 = torch.tensor([[1.0, 2.0]])
    # x0ᵀw = 0.5 − 2 = −1.5, so x1 = −1.5·x0 + b + x0 = (−0.4, −0.8)
    torch.testing.assert_close(cross(x0), torch.tensor([[-0.4, -0.8]]))
    assert CrossNetwork(7, layers=5)(torch.randn(3, 7)).shape == (3, 7)


def test_residual_mlp_identity_shortcuts_and_gradient_flow():
    torch.manual_seed(0)
    net = ResidualMLP(5, (8, 8, 4), batch_norm=True)
    assert [type(b.shortcut) for b in net.blocks] == [nn.Identity, nn.Identity, nn.Linear]
    x = torch.randn(16, 5)
    assert net(x).shape == (16, 1)
    for block in net.blocks:  # zero every residual branch F: the identity blocks pass their input through
        nn.init.zeros_(block.residual[-1].weight)
    h = net.stem(x)
    torch.testing.assert_close(net.blocks[0](h), h)
    net(x).sum().backward()
    assert net.stem[0].weight.grad.abs().sum() > 0  # the gradient reaches the input layer through the shortcuts
    net.reset_parameters()
    assert all(block.residual[-1].weight.ne(0).all() for block in net.blocks)


@pytest.mark.parametrize("cls", MODELS)
def test_models_return_named_probabilities_of_shape_b(cls):
    model = _model(cls).eval()
    out = model(_data(64))
    assert set(out) == set(cls.outputs) == {"p_ctr", "p_cvr", "p_ctcvr"}
    assert all(v.shape == (64,) for v in out.values())
    if cls is not Division:  # Division's p_cvr is a clipped ratio: see its own test
        torch.testing.assert_close(out["p_ctcvr"], out["p_ctr"] * out["p_cvr"])


def test_paper_defaults_build_batch_normalised_512_256_128_64_towers():
    model = Base([21, 11], 2)
    widths = [m.out_features for m in model.towers["cvr"].modules() if isinstance(m, nn.Linear)]
    assert widths == [512, 256, 128, 64, 1]
    assert any(isinstance(m, nn.BatchNorm1d) for m in model.modules())
    assert model.towers["ctr"](torch.randn(4, model.embedding.output_dim)).shape == (4, 1)
    assert DCN([21, 11], 2).towers["ctr"].cross.weight.shape[0] == 5
    check_model_params("dcn", DCN, {"cross_layers": 3, "emb_dim": 8, "batch_norm": False})  # Base's via **params


def test_base_cvr_loss_is_over_clicked_rows_only():
    model = _model(Base).eval()
    batch = _data(64)
    out = model(batch)
    total, parts = model.loss(out, batch)
    clicked = batch["click"] == 1
    torch.testing.assert_close(parts["cvr"], binary_log_loss(out["p_cvr"][clicked], batch["purchase"][clicked]))
    changed = {**batch, "purchase": torch.where(clicked, batch["purchase"], 1.0 - batch["purchase"])}
    torch.testing.assert_close(model.loss(out, changed)[0], total)
    no_clicks = {**batch, "click": torch.zeros(64)}
    assert model.loss(out, no_clicks)[1]["cvr"] == 0.0


def test_division_loss_on_all_rows_and_clipped_cvr_ratio():
    model = _model(Division).eval()
    batch = _data(64)
    out = model(batch)
    total, parts = model.loss(out, batch)
    assert set(parts) == {"ctr", "ctcvr"}
    torch.testing.assert_close(total, binary_log_loss(out["p_ctr"], batch["click"])
                               + binary_log_loss(out["p_ctcvr"], batch["purchase"]))
    ctr_logit, ctcvr_logit = (model.towers[task].layers[-1].bias for task in ("ctr", "ctcvr"))
    nn.init.constant_(ctcvr_logit, -3.0)  # p_ctcvr < p_ctr: the ratio is kept
    out = model(batch)
    assert torch.all(out["p_ctcvr"] < out["p_ctr"])
    torch.testing.assert_close(out["p_cvr"] * out["p_ctr"], out["p_ctcvr"])
    nn.init.constant_(ctcvr_logit, 3.0)  # p_ctcvr > p_ctr: clipped to 1
    assert torch.all(model(batch)["p_cvr"] == 1.0)
    nn.init.constant_(ctr_logit, -200.0)  # sigmoid(−200) underflows to 0
    out = model(batch)
    assert torch.all(out["p_ctr"] == 0) and torch.all(out["p_cvr"] == 1.0)


@pytest.mark.parametrize("cls", MODELS)
def test_models_learn_the_cvr_signal(cls):
    data = _data()
    model = _model(cls)
    optimizers = make_optimizers(model, lr=0.01)
    model.train()
    for _ in range(40):
        loss, _ = model.loss(model(data), data)
        for opt in optimizers:
            opt.zero_grad()
        loss.backward()
        for opt in optimizers:
            opt.step()
    with torch.no_grad():
        out = model.eval()(data)
    clicked = data["click"] == 1
    assert roc_auc_score(data["purchase"][clicked].numpy(), out["p_cvr"][clicked].numpy()) > 0.7


@pytest.mark.parametrize("cls", MODELS)
def test_trainer_fits_the_models(cls):
    model = _model(cls)
    history = Trainer(TrainConfig(epochs=2, batch_size=256, progress=False)).fit(model, _data())
    assert len(history.epochs) == 2 and np.isfinite(history.best_score)
