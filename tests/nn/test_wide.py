"""The wide term (promokit.nn.WideTerm) in the shared cores and in each domain's neural models."""

import numpy as np
import pandas as pd
import pytest
import torch

from promokit.conversion.estimator import ConversionModel
from promokit.nn import WideTerm
from promokit.training import TrainConfig, make_optimizers
from promokit.training.optim import LazyWeightDecay

SMALL = {"emb_dim": 4, "hidden": (16,), "dropout": 0.0}
FAST = TrainConfig(epochs=3, batch_size=200, lr=0.01, progress=False, embedding_decay=1.0)


def test_the_wide_logit_is_the_hand_computed_sum():
    term = WideTerm([3, 2], 1, {"ctr": ("click", {})}, mode="joint")
    with torch.no_grad():
        term.logits["ctr"].weights.table.weight[:, 0] = torch.tensor([0.0, 0.5, -1.0, 0.0, 2.0])
        term.logits["ctr"].numeric.weight.fill_(3.0)
        term.logits["ctr"].numeric.bias.fill_(-0.25)
    batch = {"cat": torch.tensor([[1, 1], [2, 0]]), "num": torch.tensor([[0.5], [-1.0]])}
    out = term({"ctr": torch.tensor([0.1, 0.2]), "cvr": torch.tensor([7.0, 8.0])}, batch)
    # row 0: 0.1 + (0.5 + 2.0) + 3·0.5 − 0.25; row 1: 0.2 + (−1.0 + 0.0) + 3·(−1) − 0.25; cvr has no wide term
    torch.testing.assert_close(out["ctr"], torch.tensor([0.1 + 2.5 + 1.5 - 0.25, 0.2 - 1.0 - 3.0 - 0.25]))
    torch.testing.assert_close(out["cvr"], torch.tensor([7.0, 8.0]))


def test_none_adds_nothing_and_offset_is_not_trained():
    logits = {"ctr": torch.tensor([0.3])}
    batch = {"cat": torch.tensor([[1]]), "num": torch.zeros(1, 0)}
    assert WideTerm([2], 0, {"ctr": ("click", {})})(logits, batch) is logits
    assert not any(p.requires_grad for p in WideTerm([2], 0, {"ctr": ("click", {})}, "offset").parameters())
    with pytest.raises(ValueError, match="wide must be one of"):
        WideTerm([2], 0, {}, "deep")


def test_a_joint_wide_term_gets_its_own_optimiser_and_decay():
    model = torch.nn.ModuleDict({"deep": torch.nn.Embedding(5, 2, sparse=True),
                                 "wide": WideTerm([5], 0, {"ctr": ("click", {})}, "joint", l2=0.3)})
    optimizers = make_optimizers(model, lr=0.01, embedding_decay=10.0)
    lazy = sorted((o for o in optimizers if isinstance(o, LazyWeightDecay)), key=lambda o: o.weight_decay)
    assert [o.weight_decay for o in lazy] == [0.3, 10.0]
    assert lazy[0].modules == [model["wide"].logits["ctr"].weights.table]
    for opt in lazy:
        opt.remove_hooks()


@pytest.mark.parametrize("name", ["esmm", "esm2", "dnn", "base", "division"])
def test_offset_with_the_deep_part_zeroed_is_exactly_the_lr_floor(impressions, name):
    # the selected models: a refit solves the network's offset without validation rows, at the prior strength
    floor = ConversionModel("lr", train=FAST, refit=False).fit(impressions)
    model = ConversionModel(name, {**SMALL, "wide": "offset"}, FAST, refit=False).fit(impressions)
    with torch.no_grad():
        for module in model.net_.modules():
            if isinstance(module, torch.nn.Sequential):  # every tower's last layer: the deep logits are 0
                module[-1].weight.zero_()
                module[-1].bias.zero_()
    expected, got = floor.predict(impressions), model.predict(impressions)
    # ESM²'s p_cvr composes four floors (eq. 3) and Division's second logit is CTCVR's: their CTR is the floor's
    for column in ("p_ctr",) if name in ("esm2", "division") else ("p_ctr", "p_cvr"):
        np.testing.assert_array_equal(got[column].to_numpy(), expected[column].to_numpy())
    assert [r["logit"] for r in model.history_.wide] == list(model.net_.wide.targets)


def test_offset_solves_each_esm2_tower_on_its_own_rows(impressions):
    model = ConversionModel("esm2", {**SMALL, "wide": "offset"}, FAST).fit(impressions)
    assert model.net_.wide.targets == {"ctr": ("click", {}), "y2": ("daction", {"click": 1}),
                                       "y3": ("purchase", {"click": 1, "daction": 1}),
                                       "y4": ("purchase", {"click": 1, "daction": 0})}
    weights = {k: v.weights.table.weight for k, v in model.net_.wide.logits.items()}
    assert all(w.abs().sum() > 0 for w in weights.values())  # each solved, none left at zero


@pytest.mark.parametrize("wide", ["joint", "offset"])
def test_a_wide_model_learns_and_round_trips(tmp_path, impressions, wide):
    train, test = impressions.iloc[:3000], impressions.iloc[3000:]
    model = ConversionModel("esmm", {**SMALL, "wide": wide}, FAST).fit(train)
    assert model.evaluate(test)["ctr_auc"] > 0.62
    model.save(tmp_path / "m")
    loaded = ConversionModel.load(tmp_path / "m")
    assert loaded.model_params_["wide"] == wide
    pd.testing.assert_frame_equal(loaded.predict(test), model.predict(test))


def _voucher_batch(n=1500, seed=0):
    """Redemption from a user's own propensity (an id effect a linear model memorises) and the discount."""
    rng = np.random.default_rng(seed)
    user, voucher = rng.integers(1, 41, n), rng.integers(1, 9, n)
    discount = rng.normal(0, 1, n)
    logit = -0.5 + np.linspace(-2, 2, 41)[user] + 0.8 * discount
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return {"cat": torch.from_numpy(np.stack([user, voucher], 1)), "num": torch.from_numpy(
        discount[:, None].astype(np.float32)), "redeemed": torch.from_numpy(y)}


@pytest.mark.parametrize("name", ["dnn", "din"])
def test_a_voucher_model_with_an_offset_and_a_zero_deep_part_is_the_lr_floor(name):
    from promokit.training import Trainer
    from promokit.voucher.models import DIN, DNN, LR, FieldLayout

    layout = FieldLayout((41, 9), 1, id_fields=(0, 1), voucher_fields=(1,), voucher_numeric=(0,))
    train, valid = _voucher_batch(), _voucher_batch(seed=1)
    if name == "din":  # no redeemed history: DIN's attention pools nothing
        for batch in (train, valid):
            batch.update(history=torch.full((len(batch["cat"]), 2), -1), hist_cat=torch.zeros(len(batch["cat"]), 2, 1,
                         dtype=torch.long), hist_num=torch.zeros(len(batch["cat"]), 2, 1))
    floor = LR(layout)
    floor.solve(train, valid)
    model = (DNN if name == "dnn" else DIN)(layout, emb_dim=4, hidden=(8,), wide="offset")
    history = Trainer(FAST).fit(model, train, valid)
    assert history.wide[0]["l2"] == floor.l2
    with torch.no_grad():
        model.mlp.layers[-1].weight.zero_()
        model.mlp.layers[-1].bias.zero_()
    torch.testing.assert_close(model.eval()(valid)["p_redeem"], floor(valid)["p_redeem"], rtol=0, atol=0)


@pytest.fixture(scope="module")
def value_tables():
    from promokit.experiments.value.world import make_world
    from promokit.value.contract import check_tables

    world = make_world(400, seed=5)
    return check_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)


@pytest.mark.parametrize("name,logits", [("esdpm-ncg", ["ctr", "cvr"]), ("mmoe", ["ctcvr"])])
def test_a_value_model_solves_its_conversion_floor_and_scores_pairs_with_it(value_tables, name, logits):
    from promokit.value.estimator import ValueModel

    small = {"expert_hidden": [16], "expert_dim": 16, "tower_hidden": [8], "emb_dim": 4, "max_len": 12}
    model = ValueModel(name, {**small, "wide": "offset"}, TrainConfig(epochs=1, batch_size=256, progress=False))
    model.fit(value_tables)
    assert [r["logit"] for r in model.history_.wide] == logits
    assert all(model.net_.wide.logits[k].weights.table.weight.abs().sum() > 0 for k in logits)
    users = np.arange(5)
    at = value_tables.time.max() + 1
    scores = model.score_matrix(value_tables, at=at, users=users, contexts=1, seed=0)
    assert scores.shape == (5, len(value_tables.funds)) and np.isfinite(scores).all()


def test_the_wide_option_of_the_commands(tmp_path, impressions):
    from typer.testing import CliRunner

    from promokit.cli import app

    path = tmp_path / "impressions.csv"
    impressions.to_csv(path, index=False)
    net = '{"emb_dim": 4, "hidden": [8], "dropout": 0.0}'

    def invoke(*args):
        return CliRunner().invoke(app, ["conversion", "train", "--data", str(path), "--epochs", "1", "--params", net,
                                        *args])

    result = invoke("--out", str(tmp_path / "m"), "--model", "esmm", "--wide", "offset")
    assert result.exit_code == 0, result.output
    config = __import__("json").loads((tmp_path / "m" / "config.json").read_text())
    assert config["params"]["wide"] == "offset"
    assert "wide" in (tmp_path / "m" / "history.json").read_text()
    bad = invoke("--out", str(tmp_path / "x"), "--wide", "deep")
    assert bad.exit_code == 2 and "--wide must be one of none, joint, offset, got 'deep'" in bad.output
    parts = tmp_path / "parts"
    parts.mkdir()
    impressions.to_parquet(parts / "part-0.parquet")
    over_parts = CliRunner().invoke(app, ["conversion", "train", "--data", str(parts), "--out", str(tmp_path / "p"),
                                          "--model", "esmm", "--epochs", "1", "--params", net])
    assert over_parts.exit_code == 0, over_parts.output
    assert "training without it (--wide none)" in " ".join(over_parts.output.split())
    assert __import__("json").loads((tmp_path / "p" / "config.json").read_text())["params"]["wide"] == "none"


def test_the_embedding_decay_follows_the_tables_size():
    from dataclasses import replace

    from promokit.conversion.estimator import DEFAULT_TRAIN
    from promokit.training import embedding_decay_for

    config = replace(DEFAULT_TRAIN, embedding_decay=10.0, decay_rows=50_000)
    assert embedding_decay_for(config, 20_000) == 10.0    # never stronger than where it was chosen
    assert embedding_decay_for(config, 800_000) == 10.0 * 50_000 / 800_000
    assert embedding_decay_for(replace(config, decay_rows=0), 800_000) == 10.0
    assert DEFAULT_TRAIN.decay_rows == 57_741


def test_a_run_records_the_decay_it_used(impressions):
    from dataclasses import replace

    model = ConversionModel("esmm", {**SMALL, "wide": "none"}, replace(FAST, decay_rows=1_000),
                            test_fraction=0).fit(impressions)
    assert model.history_.embedding_decay == pytest.approx(1.0 * 1_000 / 3_600)  # 90 % of 4,000 rows train


def test_a_model_directory_from_before_the_wide_term_loads_without_one(tmp_path, impressions):
    import json

    model = ConversionModel("esmm", {**SMALL, "wide": "none"}, FAST).fit(impressions)
    model.save(tmp_path / "old")
    config = json.loads((tmp_path / "old" / "config.json").read_text())
    del config["params"]["wide"]  # as written before the wide term existed; the default is offset now
    (tmp_path / "old" / "config.json").write_text(json.dumps(config))
    loaded = ConversionModel.load(tmp_path / "old")
    assert loaded.model_params_["wide"] == "none"
    pd.testing.assert_frame_equal(loaded.predict(impressions), model.predict(impressions))


def test_a_logit_whose_training_rows_are_one_class_gets_a_constant_floor():
    """CDNOW's deliveries are all clicks: the CTR floor is the constant smoothed rate, not an error."""
    from promokit.experiments.value.world import make_world
    from promokit.value.contract import check_tables
    from promokit.value.estimator import ValueModel

    world = make_world(300, seed=5)
    tables = check_tables(world.deliveries.assign(click=1), world.users, world.funds, world.behaviors,
                          world.consumption)
    small = {"expert_hidden": [16], "expert_dim": 16, "tower_hidden": [8], "emb_dim": 4, "max_len": 12}
    model = ValueModel("esdpm-ncg", {**small, "wide": "offset"}, TrainConfig(epochs=1, batch_size=256,
                                                                            progress=False)).fit(tables)
    ctr = next(r for r in model.history_.wide if r["logit"] == "ctr")
    assert ctr["l2"] is None and ctr["constant"] > 0.99, ctr
    assert np.isfinite(model.predict(tables).select_dtypes("number").to_numpy()).all()
