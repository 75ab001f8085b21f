import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr
from sklearn.metrics import roc_auc_score as auc

from promokit.experiments.conversion.world import ConversionWorld, compose_truth, make_world

SMALL = {"n_users": 200, "n_items": 100, "n_impressions": 20_000}
LABELS = ["click", "daction", "purchase"]


@pytest.fixture(scope="module")
def medium() -> ConversionWorld:
    return make_world(n_impressions=100_000, seed=3)


def test_same_seed_gives_the_same_world_and_another_seed_another():
    a, b, c = make_world(**SMALL, seed=1), make_world(**SMALL, seed=1), make_world(**SMALL, seed=2)
    pd.testing.assert_frame_equal(a.table, b.table)
    pd.testing.assert_frame_equal(a.truth, b.truth)
    assert a.categorical == b.categorical and a.numeric == b.numeric
    assert not a.table.equals(c.table)


def test_columns_are_the_features_then_the_labels(medium):
    table, truth = medium.table, medium.truth
    assert list(table.columns) == [*medium.categorical, *medium.numeric, *LABELS]
    assert medium.categorical[:2] == ["user_id", "item_id"]
    assert all(pd.api.types.is_integer_dtype(table[c]) for c in medium.categorical)
    assert all(pd.api.types.is_float_dtype(table[c]) for c in medium.numeric)
    assert list(truth.columns) == ["p_ctr", "p_ctavr", "p_cvr", "p_ctcvr"]
    assert truth.index.equals(table.index)


def test_labels_are_binary_and_follow_the_graph(medium):
    table = medium.table
    for label in LABELS:
        assert pd.api.types.is_integer_dtype(table[label])
        assert set(np.unique(table[label])) == {0, 1}
    unclicked = table.click == 0
    assert (table.daction[unclicked] == 0).all() and (table.purchase[unclicked] == 0).all()


def test_truth_composes_by_eqs_1_to_4(medium):
    truth = medium.truth
    assert ((truth > 0) & (truth < 1)).all().all()
    np.testing.assert_allclose(truth.p_ctcvr, truth.p_ctr * truth.p_cvr, rtol=1e-12)
    assert (truth.p_ctavr <= truth.p_ctr).all()


def test_compose_truth_by_hand():
    truth = compose_truth(*(np.array([v]) for v in (0.5, 0.2, 0.5, 0.1)))
    np.testing.assert_allclose(truth.iloc[0], [0.5, 0.1, 0.1 * 0.8 + 0.5 * 0.2, 0.5 * 0.18])


def test_base_rates_have_the_shape_of_the_paper_graph(medium):
    t = medium.table
    clicked, dacted = t.click == 1, t.daction == 1
    assert 0.08 <= t.click.mean() <= 0.12
    assert 0.15 <= t.daction[clicked].mean() <= 0.25
    assert 0.20 <= t.purchase[dacted].mean() <= 0.35
    assert 0.01 <= t.purchase[clicked & ~dacted].mean() <= 0.04
    assert 0.007 <= t.purchase.mean() <= 0.015


def test_label_rates_match_the_true_probabilities(medium):
    t, truth = medium.table, medium.truth
    clicked = (t.click == 1).to_numpy()
    for label, column, rows in [("click", "p_ctr", slice(None)), ("daction", "p_ctavr", slice(None)),
                                ("purchase", "p_ctcvr", slice(None)), ("purchase", "p_cvr", clicked)]:
        p = truth[column][rows].mean()
        standard_error = np.sqrt(p * (1 - p) / len(t[label][rows]))
        assert abs(t[label][rows].mean() - p) < 4 * standard_error, (label, column)


def test_the_world_is_predictable_and_daction_informs_purchase(medium):
    t, truth = medium.table, medium.truth
    clicked = (t.click == 1).to_numpy()
    assert 0.68 <= auc(t.click, truth.p_ctr) <= 0.82
    assert auc(t.purchase[clicked], truth.p_cvr[clicked]) > 0.65
    assert spearmanr(t.user_item_pref, truth.p_ctr)[0] > 0.3
    assert spearmanr(t.item_hist_cvr, truth.p_cvr)[0] > 0.2
    y2 = truth.p_ctavr / truth.p_ctr
    assert 0.5 < spearmanr(y2, truth.p_cvr)[0] < 0.95
    assert t.purchase[t.daction == 1].mean() > 5 * t.purchase[clicked & (t.daction == 0)].mean()


def test_extra_fields_are_listed_and_leave_the_world_unchanged():
    base = make_world(**SMALL)
    world = make_world(**SMALL, n_extra_categorical=3, extra_cardinality=50, n_extra_numeric=2)
    extra_cat, extra_num = [f"cat_extra_{k}" for k in range(3)], [f"num_extra_{k}" for k in range(2)]
    assert world.categorical == [*base.categorical, *extra_cat]
    assert world.numeric == [*base.numeric, *extra_num]
    for column in extra_cat:
        assert pd.api.types.is_integer_dtype(world.table[column])
        assert world.table[column].between(0, 49).all() and world.table[column].nunique() == 50
    for column in extra_num:
        assert abs(world.table[column].mean()) < 0.05 and abs(world.table[column].std() - 1) < 0.05
    pd.testing.assert_frame_equal(world.table.drop(columns=extra_cat + extra_num), base.table)
    pd.testing.assert_frame_equal(world.truth, base.truth)


def test_every_user_and_item_is_seen_often_at_the_default_size():
    table = make_world().table
    users, items = table.user_id.value_counts(), table.item_id.value_counts()
    assert len(users) == 2000 and len(items) == 800
    assert users.index.isin(range(2000)).all() and items.index.isin(range(800)).all()
    assert users.mean() >= 100 and items.mean() >= 100
    assert users.min() >= 5 and items.min() >= 20
