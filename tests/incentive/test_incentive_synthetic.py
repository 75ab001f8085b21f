import json

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score
from threadpoolctl import threadpool_limits

from promokit.data.errors import DataError
from promokit.experiments.incentive.world import DEFAULT_LEVELS, IncentiveWorld, make_world, read_truth, write_world

SMALL = {"n_customers": 2000, "n_merchants": 200}


@pytest.fixture(scope="module")
def small() -> IncentiveWorld:
    return make_world(**SMALL, seed=1)


@pytest.fixture(scope="module")
def large() -> IncentiveWorld:
    return make_world(40_000, 4_000, seed=3)


def _node_index(world: IncentiveWorld) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edge endpoints as row positions in the node tables, and the weights."""
    edges = world.edges
    customer = pd.Index(world.customers["customer_id"]).get_indexer(edges["customer_id"])
    merchant = pd.Index(world.merchants["merchant_id"]).get_indexer(edges["merchant_id"])
    return customer, merchant, edges["weight"].to_numpy()


def test_tables_have_the_documented_columns_and_types(small):
    c, m, e = small.customers, small.merchants, small.edges
    assert list(c.columns) == ["customer_id", "level", "redeemed", *[f"c_x{k}" for k in range(6)], "c_segment"]
    assert list(m.columns) == ["merchant_id", "level", "shares", "prior_shares", *[f"m_x{k}" for k in range(4)],
                               "m_category"]
    assert list(e.columns) == ["customer_id", "merchant_id", "weight"]
    assert c["customer_id"].iloc[123] == "c000123" and m["merchant_id"].iloc[42] == "m00042"
    assert c["customer_id"].is_unique and m["merchant_id"].is_unique
    for frame, key, category in ((c, "customer_id", "c_segment"), (m, "merchant_id", "m_category")):
        assert pd.api.types.is_string_dtype(frame[key]) and pd.api.types.is_string_dtype(frame[category])
        assert frame["level"].dtype == np.float64 and set(frame["level"]) == set(map(float, DEFAULT_LEVELS))
    assert all(c[f"c_x{k}"].dtype == np.float64 for k in range(6))
    assert all(m[f"m_x{k}"].dtype == np.float64 for k in range(4))
    assert pd.api.types.is_integer_dtype(c["redeemed"]) and set(c["redeemed"]) == {0, 1}
    for column in ("shares", "prior_shares"):
        assert pd.api.types.is_integer_dtype(m[column]) and (m[column] >= 0).all()
    assert e["weight"].dtype == np.float64 and (e["weight"] > 0).all()
    np.testing.assert_array_equal(small.levels, np.array(DEFAULT_LEVELS, dtype=np.float64))
    assert small.customer_truth.shape == (2000, 8) and small.merchant_truth.shape == (200, 8)
    assert small.change_point == (80.0, 100.0) and small.seed == 1


def test_same_seed_gives_the_same_world_and_another_seed_another(small):
    again, other = make_world(**SMALL, seed=1), make_world(**SMALL, seed=2)
    for name in ("customers", "merchants", "edges"):
        pd.testing.assert_frame_equal(getattr(small, name), getattr(again, name))
    np.testing.assert_array_equal(small.customer_truth, again.customer_truth)
    np.testing.assert_array_equal(small.merchant_truth, again.merchant_truth)
    assert not small.customers.equals(other.customers) and not small.edges.equals(other.edges)


def test_graph_has_known_ids_positive_weights_and_a_few_isolated_nodes(large):
    customer, merchant, _ = _node_index(large)
    assert (customer >= 0).all() and (merchant >= 0).all()
    assert not pd.DataFrame({"c": customer, "m": merchant}).duplicated().any()
    c_degree = np.bincount(customer, minlength=len(large.customers))
    m_degree = np.bincount(merchant, minlength=len(large.merchants))
    assert 0.01 <= (c_degree == 0).mean() <= 0.03 and 0.01 <= (m_degree == 0).mean() <= 0.03
    assert c_degree.max() <= 10
    assert m_degree.max() >= 200  # a few popular merchants with hundreds of customers


def test_the_world_passes_the_incentive_contract(small):
    from promokit.incentive.contract import check_tables

    tables = check_tables(small.customers, small.merchants, small.edges)
    np.testing.assert_array_equal(tables.levels, small.levels)
    assert tables.customer_spec.categorical == ["c_segment"] and len(tables.customer_spec.numeric) == 6


def test_truth_curves_are_probabilities_rising_with_the_level(small):
    truth = small.customer_truth
    assert ((truth >= 0) & (truth <= 1)).all()
    assert (np.diff(truth, axis=1) >= 0).all()
    assert (small.merchant_truth > 0).all() and (np.diff(small.merchant_truth, axis=1) > 0).all()


def test_the_hazard_jumps_at_the_change_point(large):
    levels = large.levels
    cumulative = -np.log1p(-large.customer_truth)
    per_unit = (np.diff(cumulative, axis=1) / np.diff(levels)).mean(axis=0)  # interval (r_j, r_j+1]
    below, above = large.change_point
    just_below = per_unit[np.searchsorted(levels, below) - 1]  # (60, 80]
    just_above = per_unit[np.searchsorted(levels, above)]      # (100, 120]
    assert just_above > 2 * just_below
    np.testing.assert_allclose(per_unit[: np.searchsorted(levels, below)], just_below, rtol=1e-9)


def test_the_curves_are_not_proportional_hazards(large):
    """Λ_u(200) / Λ_u(80) would be one number for every customer under Cox's model."""
    cumulative = -np.log1p(-large.customer_truth)
    ratio = cumulative[:, -1] / cumulative[:, 3]
    assert np.quantile(ratio, 0.9) > 2 * np.quantile(ratio, 0.1)


def test_observed_rates_track_the_truth_at_every_level(large):
    c = large.customers
    offered = np.searchsorted(large.levels, c["level"].to_numpy())
    truth = large.customer_truth[np.arange(len(c)), offered]
    redeemed = c["redeemed"].to_numpy()
    for j in range(len(large.levels)):
        rows = offered == j
        p = truth[rows].mean()
        assert abs(redeemed[rows].mean() - p) < 4 * np.sqrt(p * (1 - p) / rows.sum()), large.levels[j]
    assert 0.15 <= redeemed.mean() <= 0.35
    assert 0.75 <= roc_auc_score(redeemed, truth) <= 0.85


def test_merchant_labels_track_the_merchant_truth(large):
    m = large.merchants
    offered = np.searchsorted(large.levels, m["level"].to_numpy())
    truth = large.merchant_truth[np.arange(len(m)), offered]
    label = (m["shares"] / np.maximum(m["prior_shares"], 1)).to_numpy()
    expected = np.maximum(m["prior_shares"], 1).to_numpy()
    # shares ~ Poisson(truth · max(prior, 1)), so the label's variance is truth / max(prior, 1)
    assert abs(label.mean() - truth.mean()) < 4 * np.sqrt((truth / expected).sum()) / len(m)


def test_the_merchant_influence_is_two_hops_away(large):
    """The true response correlates with the c_x0 of the other customers of the customer's merchants beyond what
    the customer's own features explain; the merchants' own features add nothing."""
    c, m = large.customers, large.merchants
    customer, merchant, weight = _node_index(large)
    n_c, n_m = len(c), len(m)
    x0 = c["c_x0"].to_numpy()
    total = np.bincount(merchant, weights=weight * x0[customer], minlength=n_m)[merchant] - weight * x0[customer]
    others = np.bincount(merchant, weights=weight, minlength=n_m)[merchant] - weight
    keep = others > 0
    two_hop = (np.bincount(customer[keep], weights=weight[keep] * total[keep] / others[keep], minlength=n_c)
               / np.maximum(np.bincount(customer[keep], weights=weight[keep], minlength=n_c), 1e-12))
    one_hop = [np.bincount(customer, weights=weight * m[f"m_x{k}"].to_numpy()[merchant], minlength=n_c)
               / np.maximum(np.bincount(customer, weights=weight, minlength=n_c), 1e-12) for k in range(4)]
    own = c[[f"c_x{k}" for k in range(6)]].to_numpy()
    basis = np.column_stack([np.ones(n_c), own, own ** 2, np.tanh(own), np.sin(own), np.logaddexp(0, own),
                             pd.get_dummies(c["c_segment"]).to_numpy(np.float64)])
    target = np.log(-np.log1p(-large.customer_truth[:, -1]))  # log Λ_u at the top level

    def explained(columns):
        design = np.column_stack([basis, *columns])
        residual = target - design @ np.linalg.lstsq(design, target, rcond=None)[0]
        return 1 - residual.var() / target.var()

    with threadpool_limits(1):  # a tall thin least squares: threads only contend
        alone, with_one_hop, with_two_hop = explained([]), explained(one_hop), explained([two_hop])
    assert with_one_hop - alone < 0.005
    assert with_two_hop - alone > 0.05


def test_write_world_then_read_truth(small, tmp_path):
    paths = write_world(small, tmp_path / "world")
    assert set(paths) == {"customers", "merchants", "edges", "truth_customers", "truth_merchants", "world"}
    pd.testing.assert_frame_equal(pd.read_parquet(paths["customers"]), small.customers)
    pd.testing.assert_frame_equal(pd.read_parquet(paths["edges"]), small.edges)
    for name, table, key, truth in (("truth_customers", small.customers, "customer_id", small.customer_truth),
                                    ("truth_merchants", small.merchants, "merchant_id", small.merchant_truth)):
        ids, levels, matrix = read_truth(paths[name])
        np.testing.assert_array_equal(ids, table[key].to_numpy())
        np.testing.assert_array_equal(levels, small.levels)
        np.testing.assert_array_equal(matrix, truth)
    facts = json.loads(paths["world"].read_text())
    assert facts["customers"] == 2000 and facts["change_point"] == [80.0, 100.0] and facts["seed"] == 1
    assert facts["redemption_rate"] == pytest.approx(small.customers["redeemed"].mean())


def test_read_truth_rejects_other_tables(small, tmp_path):
    path = write_world(small, tmp_path)["edges"]
    with pytest.raises(DataError, match="true_<level>"):
        read_truth(path)


@pytest.mark.parametrize("levels", [(20, 40, 60), (100, 80, 120), (50, 150, np.nan)])
def test_levels_must_straddle_the_change_point_and_increase(levels):
    with pytest.raises(DataError, match="levels"):
        make_world(**SMALL, levels=levels)
