"""The incentive linear floor ``lr``: log-linear hazards on one-hot inputs, solved to its optimum by L-BFGS."""

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.sparse import csr_matrix

from promokit.data import DataError
from promokit.experiments.incentive.world import make_world
from promokit.incentive.contract import check_tables
from promokit.incentive.estimator import IncentiveModel, labelled_rows
from promokit.incentive.models.linear import _rows, customer_objective, head_weights, merchant_objective, offered
from promokit.training.logistic import L2_GRID, TOLERANCE, prior_l2


@pytest.fixture(scope="module")
def solved():
    world = make_world(1200, 120, seed=5)
    tables = check_tables(world.customers, world.merchants, world.edges)
    return tables, IncentiveModel("lr").fit(tables)


@pytest.mark.parametrize("objective, k", [(customer_objective, 4), (merchant_objective, 4)])
def test_the_gradients_are_the_objectives_derivatives(objective, k):
    rng = np.random.default_rng(0)
    x = np.column_stack([np.eye(3)[rng.integers(0, 3, 60)], rng.normal(size=(60, 2))])
    level, y = rng.integers(0, k, 60), rng.integers(0, 2, 60).astype(float)
    reach = ((np.arange(k) <= level[:, None]) * 0.25 if objective is customer_objective else
             np.linspace(0.25, 1, k)[level])
    size = k * 6 if objective is customer_objective else 12
    theta = rng.normal(scale=0.5, size=size)
    args = (csr_matrix(x), reach, y if objective is customer_objective else rng.gamma(2.0, size=60), 0.01)
    _, grad = objective(theta, *args)
    step = 1e-6
    numeric = [(objective(theta + step * e, *args)[0] - objective(theta - step * e, *args)[0]) / (2 * step)
               for e in np.eye(size)]
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)


def test_the_solution_is_a_stationary_point_of_the_chosen_strength(solved):
    tables, model = solved
    # refit on every labelled customer and merchant at the strengths chosen on the validation nodes
    train = labelled_rows(tables, tables.labelled_customers, np.arange(len(tables.merchants)))
    net, levels = model.net_, model.net_.customer_head.values
    chosen = {r["part"]: r["l2"] for r in model.history_.epochs if r["chosen"]}
    assert model.model_params_["l2_customers"] == chosen["customers"]
    assert model.model_params_["l2_merchants"] == chosen["merchants"]
    assert model.holdout_["refit"]["params"] == {f"l2_{part}": l2 for part, l2 in chosen.items()}
    assert model.params is None  # what fit chose is in model_params, not the parameter
    thetas = head_weights(net)
    for side, objective, theta in (("customers", customer_objective, thetas["customers"]),
                                   ("merchants", merchant_objective, thetas["merchants"])):
        value, grad = objective(theta, *offered(side, *_rows(net, train, side), levels), chosen[side])
        # solved to the floors' tolerance; the weights are float32, which rounds the gradient by about 1e-5
        assert np.abs(grad).max() < min(1e-4, TOLERANCE * chosen[side]) + 1e-5, side
        assert np.isfinite(value)


def test_the_strength_is_chosen_on_the_validation_customers(solved):
    tables, model = solved
    path = [r for r in model.history_.epochs if r["part"] == "customers"]
    rows = len(model.split_rows(tables).train_customers)  # the search starts at the grid's strength nearest the prior
    assert path[0]["l2"] == min(L2_GRID, key=lambda s: abs(np.log(s / prior_l2(rows))))
    best = max(path, key=lambda r: r["valid_customer_loglik"])
    assert best["chosen"] and sum(r["chosen"] for r in path) == 1
    assert model.history_.unit == "l2 strength" and "chosen: part customers" in model.history_.summary()


def test_a_saturated_floor_reproduces_the_redemption_rate_of_every_group_and_value(tmp_path):
    """Two segments × two values, nothing else varying: with (almost) no penalty the optimum's f_c is each cell's
    observed redemption rate (its hazards are free per segment and piece, and the rates rise with the value)."""
    rates = {("a", 10.0): 0.2, ("a", 20.0): 0.5, ("b", 10.0): 0.1, ("b", 20.0): 0.35}
    rows = []
    for (segment, level), rate in rates.items():
        redeemed = np.zeros(40)
        redeemed[:round(40 * rate)] = 1
        rows += [{"segment": segment, "level": level, "redeemed": r} for r in redeemed]
    customers = pd.DataFrame(rows).assign(customer_id=lambda f: np.arange(len(f)))
    merchants = pd.DataFrame({"merchant_id": [0, 1, 2, 3], "level": [10.0, 20.0, 10.0, 20.0], "shares": [1, 3, 2, 4],
                              "prior_shares": [2.0, 2.0, 2.0, 2.0]})
    edges = pd.DataFrame({"customer_id": customers.customer_id, "merchant_id": 0})
    tables = check_tables(customers, merchants, edges)
    model = IncentiveModel("lr", {"l2_customers": 1e-9, "l2_merchants": 1e-9}, test_fraction=0).fit(tables,
                                                                                    validation=0)
    f_c = model.responses(tables).customers
    for (segment, level), rate in rates.items():
        row = customers.index[(customers.segment == segment) & (customers.level == level)][0]
        np.testing.assert_allclose(f_c[row, tables.levels.tolist().index(level)], rate, atol=2e-4)
    model.save(tmp_path / "lr")
    np.testing.assert_allclose(IncentiveModel.load(tmp_path / "lr").responses(tables).customers, f_c, atol=1e-6)


def test_a_fixed_strength_is_solved_alone_and_a_bad_one_is_refused(solved):
    tables, _ = solved
    model = IncentiveModel("lr", {"l2_customers": 1e-3}).fit(tables)
    assert [r["l2"] for r in model.history_.epochs if r["part"] == "customers"] == [1e-3]
    assert isinstance(model.net_.customer_tower, torch.nn.Identity)
    with pytest.raises(DataError, match="model 'gnn-hazard' has no parameter 'l2_customers'"):
        IncentiveModel("gnn-hazard", {"l2_customers": 1e-3})
    for bad in (-1e-3, "strong", float("nan"), True):
        with pytest.raises(DataError, match="l2_merchants must be a number ≥ 0"):
            IncentiveModel("lr", {"l2_merchants": bad})


def test_the_floor_prints_a_line_per_strength_solved_unless_told_not_to(capsys):
    world = make_world(600, 60, seed=3)
    tables = check_tables(world.customers, world.merchants, world.edges)
    model = IncentiveModel("lr", train={"progress": True}, refit=False).fit(tables)
    printed = " ".join(capsys.readouterr().out.split())
    for record in model.history_.epochs:
        metric = next(key for key in record if key.startswith("valid_"))
        assert f"lr {record['part']}: l2 {record['l2']:.1e}, {metric} {record[metric]:.4f}" in printed
    IncentiveModel("lr", train={"progress": False}, refit=False).fit(tables)
    assert capsys.readouterr().out == ""


def test_the_refit_starts_its_solves_from_the_selected_floor(monkeypatch):
    import promokit.incentive.estimator as estimator

    world = make_world(600, 60, seed=3)
    tables = check_tables(world.customers, world.merchants, world.edges)
    starts, solved, solve = [], [], estimator.solve_floor

    def recorded(net, *args, start=None, **kwargs):
        starts.append(start)
        history = solve(net, *args, start=start, **kwargs)
        solved.append(head_weights(net))
        return history

    monkeypatch.setattr(estimator, "solve_floor", recorded)
    IncentiveModel("lr", train={"progress": False}).fit(tables)
    assert starts[0] is None and len(starts) == 2  # the selection from zero, the refit from what it selected
    for side in ("customers", "merchants"):
        np.testing.assert_array_equal(starts[1][side], solved[0][side])
