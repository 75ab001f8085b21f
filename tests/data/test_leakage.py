"""The label-leak guard (promokit.data.leakage) and its wiring into conversion training and evaluation."""

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from promokit.conversion.estimator import ConversionModel
from promokit.conversion.evaluate import conversion_metrics
from promokit.data import FeatureSpec
from promokit.data.leakage import LEAK_AUC, SUSPECT_AUC, Leak, _key, _level_auc, feature_auc, find_leaks, leak_warning
from promokit.metrics import auc
from promokit.training import TrainConfig

SMOKE = Path(__file__).resolve().parents[3] / "shared" / "data" / "kuairand_pure" / "kuairand_pure_smoke_2000.parquet"
SMALL = {"emb_dim": 4, "hidden": (16,), "dropout": 0.0}
FAST = TrainConfig(epochs=2, batch_size=200, lr=0.01, progress=False)


def _leaky(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with ``watch_ratio``: the purchase plus a little noise, a measurement of the outcome."""
    rng = np.random.default_rng(3)
    return table.assign(watch_ratio=table.purchase + rng.normal(0, 0.1, len(table)))


def test_a_feature_equal_to_the_label_plus_noise_fires_and_is_named(impressions):
    table = _leaky(impressions)
    clicked = table.click.to_numpy() == 1
    leaks = find_leaks(table, ["user_id", "item_id", "segment"], ["price", "watch_ratio"],
                       {"click": (table.click.to_numpy(), None), "purchase": (table.purchase.to_numpy(), clicked)})
    assert [(leak.feature, leak.label) for leak in leaks] == [("watch_ratio", "purchase")]
    assert leaks[0].auc > 0.999
    assert leak_warning(leaks) == (f"feature 'watch_ratio' alone has AUC 1.000 for purchase (above {LEAK_AUC}): a "
                                   "label leak, a column measured after the outcome? Drop it from the features, or "
                                   "allow it with `allow_leaky` watch_ratio")
    assert not find_leaks(table, [], ["watch_ratio"], {"purchase": (table.purchase.to_numpy(), clicked)},
                          allow=["watch_ratio"])
    assert leak_warning([]) is None


def test_a_categorical_leak_fires_by_its_levels_label_rate_and_ids_with_few_rows_each_do_not():
    rng = np.random.default_rng(0)
    y = (rng.random(20_000) < 0.3).astype(int)
    outcome = pd.Series(np.where(y == 1, "watched", "skipped"))  # a text column that spells the label
    assert feature_auc(outcome, y, categorical=True) == 1.0
    ids = pd.Series(rng.integers(0, 5_000, len(y)))  # 4 rows per id: memorised on its rows, AUC 1 there
    assert feature_auc(ids, y, categorical=True) < 0.6
    assert feature_auc(pd.Series(-y + rng.normal(0, 0.01, len(y))), y, categorical=False) > 0.99  # either direction


def test_a_levels_auc_counted_by_level_is_the_auc_of_its_rows():
    """The guard scores a categorical column from each level's counts: the same AUC as ranking its rows, ties
    (levels of equal rate, rows of one level) counted 1/2."""
    rng = np.random.default_rng(4)
    rate = np.round(rng.random(30), 1)  # 30 levels, many sharing a rate
    codes = rng.integers(0, 30, 5000)
    y = (rng.random(5000) < rate[codes]).astype(float)
    positives = np.bincount(codes, weights=y, minlength=30)
    negatives = np.bincount(codes, minlength=30) - positives
    assert _level_auc(rate, positives, negatives) == pytest.approx(auc(y, rate[codes]), abs=1e-12)


def _rare(n: int = 2000, positives: int = 5) -> tuple[pd.DataFrame, np.ndarray]:
    """A label with a few ``positives`` among ``n`` rows, its copies and the columns that must not be called leaks."""
    rng = np.random.default_rng(1)
    y = np.zeros(n, dtype=int)
    y[rng.choice(n, positives, replace=False)] = 1
    return pd.DataFrame({
        "copy": y, "negation": 1 - y, "spelled": np.where(y == 1, "liked", "not liked"),
        "row_id": np.arange(n),  # a level per row: every level holds a single class, as chance would have it
        "user_id": rng.integers(0, n // 2, n),  # about two rows per level
        "noise": rng.normal(size=n),
    }), y


def test_a_copy_of_a_rare_label_is_named_whatever_the_class_counts():
    table, y = _rare()
    leaks = find_leaks(table, ["spelled", "row_id", "user_id"], ["copy", "negation", "noise"],
                       {"like": (y, None)})
    assert leaks == [Leak("spelled", "like", 1.0), Leak("copy", "like", 1.0), Leak("negation", "like", 1.0)]
    assert "feature 'copy' alone has AUC 1.000 for like" in leak_warning(leaks)
    table, y = _rare(positives=1)  # a single positive: a level of its own by chance once in 2,000 draws
    assert feature_auc(table["copy"], y, categorical=True) == 1.0
    assert np.isnan(feature_auc(table.row_id, y, categorical=True))
    table, y = _rare(n=500, positives=1)  # once in 500 draws: chance enough
    assert np.isnan(feature_auc(table["copy"], y, categorical=True))
    assert np.isnan(feature_auc(table.noise.where(y == 0, 9.0), y, categorical=False))  # the maximum


def test_a_label_with_a_single_class_gives_no_verdict():
    table, y = _rare(positives=0)
    assert find_leaks(table, ["spelled"], ["copy", "negation"], {"like": (y, None)}) == []
    assert np.isnan(feature_auc(table["copy"], y, categorical=False))


def test_a_column_short_of_a_leak_is_a_suspect_to_check_and_allow_leaky_silences_both(impressions):
    rng = np.random.default_rng(2)
    table = _leaky(impressions).assign(long_view=impressions.purchase + rng.normal(0, 0.55, len(impressions)))
    clicked = table.click.to_numpy() == 1
    labels = {"purchase": (table.purchase.to_numpy(), clicked)}
    leaks = find_leaks(table, [], ["price", "long_view"], labels)
    assert [(leak.feature, leak.suspect) for leak in leaks] == [("long_view", True)]
    assert SUSPECT_AUC < leaks[0].auc < LEAK_AUC
    assert leak_warning(leaks) == (f"check these: 'long_view' {leaks[0].auc:.3f} for purchase (alone above "
                                   f"{SUSPECT_AUC}, short of a leak's {LEAK_AUC}: measured after the outcome? allow "
                                   "them with `allow_leaky` long_view)")
    both = leak_warning(find_leaks(table, [], ["watch_ratio", "long_view"], labels))
    assert both.startswith("feature 'watch_ratio' alone has AUC 1.000 for purchase (above 0.95)")
    assert "allow it with `allow_leaky` watch_ratio; check these: 'long_view' 0." in both
    assert find_leaks(table, [], ["watch_ratio", "long_view"], labels, allow=["watch_ratio", "long_view"]) == []


@pytest.mark.skipif(not SMOKE.is_file(), reason=f"no {SMOKE}")
@pytest.mark.filterwarnings("ignore:validation auc")
def test_fit_names_a_copy_of_kuairands_rare_like():
    raw = pd.read_parquet(SMOKE)  # 806 clicks; 16 of them liked, too few for an AUC
    table = raw[["user_id", "video_id", "author_id", "tab", "date", "is_click", "is_like", "watch_ratio"]]
    spec = FeatureSpec(labels={"click": "is_click", "purchase": "is_like"}, time_key="date")
    model = ConversionModel("lr", train={"progress": False}, spec=spec, repair_labels=True)
    with pytest.warns(UserWarning, match=r"feature 'like' alone has AUC 1.000 for is_like \(on clicked rows\).*"
                                         r"check these: 'watch_ratio' 0.9\d\d for is_click"):
        model.fit(table.assign(like=raw.is_like))


def test_the_synthetic_world_with_its_default_features_is_silent():
    from promokit.experiments.conversion.world import make_world

    world = make_world(n_users=300, n_items=200, n_impressions=40_000, n_extra_categorical=1, n_extra_numeric=1,
                       n_micro=3)
    spec = FeatureSpec(micro_behaviors=world.micro_behaviors, types={"cat_extra_0": "categorical"})  # 100,000 ids
    model = ConversionModel("esmm", spec=spec)
    model.feature_spec_ = model.resolve_spec(world.table)
    assert {"user_id", "item_id", "cat_extra_0"} <= set(model.feature_spec_.categorical)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.warn_leaks(world.table)


def test_fit_warns_of_a_leak_before_training_and_allow_leaky_silences_it(impressions, tmp_path):
    table = _leaky(impressions)
    with pytest.warns(UserWarning, match=r"feature 'watch_ratio' alone has AUC 1.000 for purchase \(on clicked rows\)"):
        ConversionModel("gbdt", None, FAST).fit(table, validation=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = ConversionModel("gbdt", None, FAST, FeatureSpec(allow_leaky=["watch_ratio"])).fit(table, validation=0)
    model.save(tmp_path / "m")
    assert ConversionModel.load(tmp_path / "m").feature_spec_.allow_leaky == ["watch_ratio"]
    assert FeatureSpec.from_dict({"allow_leaky": ["a"]}).allow_leaky == ["a"]


def test_the_refit_judges_no_column_again(impressions, monkeypatch):
    """The selecting fit judges the columns once; the refit on every row, within ``judged_already``, finds nothing."""
    import promokit.data.leakage as leakage

    table, judged = _leaky(impressions), []
    original = leakage._judged_auc
    monkeypatch.setattr(leakage, "_judged_auc", lambda *a: judged.append(1) or original(*a))
    with pytest.warns(UserWarning, match="watch_ratio"):
        model = ConversionModel("lr", None, FAST).fit(table)
    assert "refit" in model.holdout_ and judged
    once = len(judged)
    judged.clear()
    ConversionModel("lr", None, FAST, refit=False).fit(table)
    assert len(judged) == once
    with leakage.judged_already():
        assert find_leaks(table, ["user_id"], ["watch_ratio"], {"purchase": (table["purchase"].to_numpy(), None)}) == []


def test_allow_leaky_names_a_column_of_the_table(impressions):
    from promokit.data import DataError

    with pytest.raises(DataError, match=r"column 'watch_ratoi' \(allowed to leak, `allow_leaky`\) is missing"):
        ConversionModel("gbdt", spec=FeatureSpec(allow_leaky=["watch_ratoi"])).fit(_leaky(impressions))


def test_conversion_spec_adds_allow_leaky_from_a_list_or_comma_separated():
    from promokit.conversion.contract import conversion_spec

    spec = conversion_spec(FeatureSpec(allow_leaky=["a"]), allow_leaky="b, a,c")
    assert spec.allow_leaky == ["a", "b", "c"]


def test_a_near_perfect_validation_auc_is_a_warning(impressions):
    table = impressions.assign(bought=impressions.purchase.astype(float))  # allowed: neither guard nor post-click
    with pytest.warns(UserWarning, match=r"validation .*cvr_auc 1.0000.* \(above 0.99\): .*label leak") as caught:
        ConversionModel("esmm", SMALL, FAST, FeatureSpec(allow_leaky=["bought"])).fit(table)
    assert len(caught) == 1


def test_evaluate_says_how_many_rows_the_remembered_repair_repaired(impressions):
    table = impressions.copy()
    table.loc[table.index[table.click == 0][:70], "purchase"] = 1
    model = ConversionModel("gbdt", None, FAST, repair_labels=True, test_fraction=0).fit(table, validation=0)
    with pytest.warns(UserWarning, match=r"repaired 70 of the 4,000 rows scored, where purchase=1 without a click.*"
                                         "`repair_labels`"):
        model.evaluate(table)


def test_a_gauc_resting_on_few_groups_is_a_caution():
    rng = np.random.default_rng(0)
    n = 2000
    groups = np.arange(n) // 10  # 200 groups of 10 rows
    click = (rng.random(n) < 0.5).astype(float)
    purchase = np.zeros(n)
    purchase[[0, 10, 20, 30]] = 1  # 4 of 200 groups hold a purchase: 2 %
    click[[0, 10, 20, 30]] = 1
    predictions = {k: rng.random(n) for k in ("p_ctr", "p_cvr", "p_ctcvr")}
    with pytest.warns(UserWarning, match=r"CTCVR GAUC rests on 4 of 200 groups \(2.0%, under 5%\)"):
        metrics = conversion_metrics({"click": click, "purchase": purchase}, predictions, groups)
    assert metrics["ctcvr_gauc_groups"] == 200 and metrics["ctcvr_gauc_skipped"] == 196
    purchase[np.arange(0, n, 10)[:20]] = 1  # 20 of 200: 10 %, no caution
    click[purchase == 1] = 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        conversion_metrics({"click": click, "purchase": purchase}, predictions, groups)


def test_the_train_command_names_the_flag_and_allow_leaky_silences_it(impressions, tmp_path):
    from typer.testing import CliRunner

    from promokit.cli import app

    path = tmp_path / "t.parquet"
    _leaky(impressions).to_parquet(path)
    args = ["conversion", "train", "--data", str(path), "--model", "gbdt", "--out", str(tmp_path / "m")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "allow it with --allow-leaky watch_ratio" in " ".join(result.output.split())
    result = CliRunner().invoke(app, [*args, "--allow-leaky", "watch_ratio"])
    assert result.exit_code == 0 and "label leak" not in result.output
    assert ConversionModel.load(tmp_path / "m").feature_spec_.allow_leaky == ["watch_ratio"]


def test_a_numeric_column_is_read_by_the_dense_rank_of_its_values_missing_first():
    assert _key(pd.Series([2.5, np.nan, -1.0, 2.5, 0.0]), False).tolist() == [3, 0, 1, 3, 2]
    assert _key(pd.Series([2.5, -1.0, 2.5, 0.0, -0.0]), False).tolist() == [2, 0, 2, 1, 1]
