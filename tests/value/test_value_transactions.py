"""Value tables from a purchase log (``promokit.value.transactions``): windows, RFM and spend features checked by
hand, products as funds, the CLI round trip to a trained floor, the metrics left out with one fund, and bad inputs
as one-line errors."""

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.cli import app
from promokit.data import DataError
from promokit.value.contract import check_tables
from promokit.value.estimator import ValueModel
from promokit.value.evaluate import SEVERAL_FUNDS
from promokit.value.transactions import from_transactions, write_value_tables

runner = CliRunner()
LOG = pd.DataFrame({
    "customer_id": ["a", "a", "a", "b", "c", "a", "c", "d"],
    "time": ["2024-01-01", "2024-01-01 18:00", "2024-01-20", "2024-01-31 12:00", "2024-01-10",
             "2024-02-05", "2024-03-02", "2024-02-10"],
    "amount": [10.0, 30.0, 20.0, 5.0, 8.0, 25.5, 99.0, 7.0],
    "product": ["x", "y", "x", "x", "y", "y", "x", "x"],
})
WINDOWS = {"feature_window": (None, "2024-02-01"), "target_window": ("2024-02-01", "2024-03-01")}


def test_one_fund_features_and_target_by_hand():
    tables = from_transactions(LOG, **WINDOWS)
    users = tables["users"].set_index("user_id")
    assert list(users.index) == ["a", "b", "c"]  # d bought in the target window only: nothing to predict from
    a = users.loc["a"]
    assert a.log_purchases == pytest.approx(np.log1p(3))
    assert a.log_purchase_days == pytest.approx(np.log1p(2))  # two purchases on Jan 1
    assert a.log_total_spend == pytest.approx(np.log1p(60.0)) and a.log_mean_spend == pytest.approx(np.log1p(20.0))
    assert a.log_first_spend == pytest.approx(np.log1p(10.0))
    assert a.days_since_first == 31.0 and a.days_since_last == 12.0  # to the window's end, Feb 1
    assert users.loc["b"].days_since_last == 0.5
    deliveries = tables["deliveries"]
    assert list(tables["funds"].fund) == ["all"] and set(deliveries.fund) == {"all"}
    # c's purchase on Mar 2 is after the target window; the delivery is at its start
    assert deliveries.amount.tolist() == [25.5, 0.0, 0.0] and deliveries.convert.tolist() == [1, 0, 0]
    assert (deliveries.click == 1).all() and (deliveries.time == pd.Timestamp("2024-02-01")).all()
    assert len(tables["behaviors"]) == 5 and (tables["behaviors"].time < pd.Timestamp("2024-02-01")).all()
    check_tables(tables["deliveries"], tables["users"], tables["funds"], tables["behaviors"])


def test_products_are_funds_with_the_customers_spend_on_each():
    tables = from_transactions(LOG, product="product", **WINDOWS)
    assert list(tables["funds"].fund) == ["x", "y"]
    deliveries = tables["deliveries"].set_index(["user_id", "fund"])
    assert len(deliveries) == 6 and deliveries.loc[("a", "y"), "amount"] == 25.5
    assert deliveries.loc[("a", "x"), "amount"] == 0.0 and deliveries.convert.sum() == 1
    assert deliveries.loc[("a", "x"), "log_fund_spend"] == pytest.approx(np.log1p(30.0))
    assert deliveries.loc[("a", "x"), "log_fund_purchases"] == pytest.approx(np.log1p(2))
    assert deliveries.loc[("b", "y"), "log_fund_spend"] == 0.0
    assert list(tables["behaviors"].fund) == ["x", "y", "x", "x", "y"]


def test_a_window_as_a_duration_or_text_is_measured_from_the_other():
    expected = from_transactions(LOG, **WINDOWS)
    for windows in ({"feature_window": ",2024-02-01", "target_window": "29D"},
                    {"feature_window": ("2023-12-01", "2024-02-01"), "target_window": "2024-02-01, 2024-03-01"},
                    {"feature_window": "62D", "target_window": ("2024-02-01", "2024-03-01")}):
        got = from_transactions(LOG, **windows)
        for name in expected:
            pd.testing.assert_frame_equal(got[name], expected[name])


def test_cdnow_is_the_same_mapping():
    from promokit.value.cdnow import cdnow_tables

    log = pd.DataFrame({"customer_id": ["1", "1", "2"], "date": pd.to_datetime(["1997-01-01", "1997-10-01",
                                                                                  "1997-09-30"]),
                        "cds": [1, 2, 3], "amount": [10.0, 12.0, 5.0]})
    tables = cdnow_tables(log)
    assert tables.users.log_cds.tolist() == pytest.approx(np.log1p([1, 3]).tolist())
    assert tables.users.days_since_last.tolist() == [273.0, 1.0] and tables.amount.tolist() == [12.0, 0.0]


def _log(n: int = 400, seed: int = 0) -> pd.DataFrame:
    """Customers who buy at their own rate over a year; the heavy buyers keep buying in the target window."""
    rng = np.random.default_rng(seed)
    rate = rng.gamma(0.7, 4.0, n)
    rows = [(f"c{i}", pd.Timestamp("2024-01-01") + pd.Timedelta(days=float(day)), round(float(rng.gamma(2, 15)), 2))
            for i in range(n) for day in np.sort(rng.uniform(0, 365, rng.poisson(rate[i]) + 1))]
    return pd.DataFrame(rows, columns=["cust", "when", "spend"])


def test_cli_round_trip_to_a_trained_floor_without_the_fund_metrics(tmp_path):
    _log().to_csv(tmp_path / "log.csv", index=False)
    data = tmp_path / "data"
    result = runner.invoke(app, ["value", "from-transactions", "--transactions", str(tmp_path / "log.csv"),
                                 "--out", str(data), "--customer", "cust", "--time", "when", "--amount", "spend",
                                 "--feature-window", "2024-01-01,2024-09-01", "--target-window", "122D"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "customers, 1 fund, " in said and "--split random" in said
    assert sorted(p.name for p in data.iterdir()) == [f"{t}.parquet" for t in ("behaviors", "deliveries", "funds",
                                                                                "users")]
    model = tmp_path / "floor"
    result = runner.invoke(app, ["value", "train", "--data", str(data), "--model", "hurdle", "--split", "random",
                                 "--out", str(model), "--params", '{"n_trees": 20}'])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["value", "evaluate", "--model", str(model), "--data", str(data),
                                 "--out", str(tmp_path / "eval")])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "one fund: THC, THA, best_differs and uplift_spread compare funds" in said
    assert "auc" in said and "thc" not in said


def test_the_fund_metrics_need_several_funds():
    log = _log(300).assign(product=lambda f: np.where(f.spend > 30, "big", "small"))
    windows = {"feature_window": ("2024-01-01", "2024-09-01"), "target_window": "122D"}
    fit = {"split": "random", "params": {"n_trees": 20}}
    for product, several in ((None, False), ("product", True)):
        tables = from_transactions(log, customer="cust", time="when", amount="spend", product=product, **windows)
        metrics = dict(ValueModel("hurdle", fit["params"], split="random").fit(tables).evaluate(tables))
        assert set(SEVERAL_FUNDS) <= set(metrics) if several else not set(SEVERAL_FUNDS) & set(metrics)
        assert np.isfinite(metrics["auc"])


def test_the_writer_refuses_a_folder_holding_csv_tables(tmp_path):
    (tmp_path / "users.csv").write_text("user_id\n1\n")
    with pytest.raises(DataError, match=r"^`out` .* already holds users.csv"):
        write_value_tables(from_transactions(LOG, **WINDOWS), tmp_path)


BAD = [
    ({"customer": "cust"}, LOG, r"^transactions: `customer` names no column: column 'cust'"),
    ({"product": "prodct"}, LOG, r"did you mean 'product'\?"),
    ({"product": "amount"}, LOG, r"^transactions: `amount` and `product` both name column 'amount'$"),
    ({}, LOG.assign(amount=["10"] * 7 + ["ten"]), r"`amount` column 'amount' must hold finite numbers ≥ 0 but has 1"),
    ({}, LOG.assign(amount=[10.0] * 7 + [-3.0]), r"net refunds out of the purchases first$"),
    ({}, LOG.assign(amount=True), r"`amount` column 'amount' holds booleans"),
    ({}, LOG.assign(time=["2024-01-01"] * 7 + ["soon"]), r"`time` column 'time' has 1 missing values or values that"),
    ({}, LOG.assign(time=20240101), (r"`time` column 'time' holds numbers, e\.g\. 20240101; give datetimes, or text "
                                    r"with its `time_format`")),
    ({"time_format": "%Y%m%d"}, LOG, r"do not read in the format '%Y%m%d'"),
    ({}, LOG.assign(customer_id=["a", None] + ["a"] * 6), r"`customer` column 'customer_id' has 1 missing values"),
    ({"product": "product"}, LOG.assign(product=[None] + ["x"] * 7), r"`product` column 'product' has 1 missing"),
    ({}, LOG.iloc[:0], r"^`transactions` has no rows$"),
    ({}, pd.concat([LOG, LOG.amount], axis=1), r"column 'amount' appears more than once"),
    ({"feature_window": ("2024-02-01", "2024-01-01")}, LOG, r"^`feature_window` \[2024-02-01, 2024-01-01\) is empty"),
    ({"target_window": ("2024-01-15", "2024-03-01")}, LOG,
     r"^`target_window` starts at 2024-01-15, before `feature_window` ends at 2024-02-01: the windows overlap"),
    ({"feature_window": ("2023-01-01", "2023-06-01")}, LOG, (r"^`feature_window` \[2023-01-01, 2023-06-01\) holds no "
                                                            r"transaction of the 8, which run from 2024-01-01")),
    ({"target_window": ("2025-01-01", "2025-02-01")}, LOG, r"^`target_window` \[2025-01-01, 2025-02-01\) holds no"),
    ({"feature_window": (None, "2023-06-01")}, LOG, r"^`feature_window` \[2023-06-01, 2023-06-01\) holds no"),
    ({"feature_window": "30D", "target_window": "30D"}, LOG, r"are both durations"),
    ({"target_window": "30 days"}, LOG, r"^`target_window`: '30 days' is not a duration"),
    ({"target_window": "-5D"}, LOG, r"^`target_window`: '-5D' is not a duration"),
    ({"target_window": ("2024-02-01", "later")}, LOG, r"^`target_window`: 'later' is not a time"),
    ({"target_window": (20240201, "2024-03-01")}, LOG, r"^`target_window`: 20240201 is not a time"),
    ({"target_window": ("2024-02-01", None)}, LOG, r"^`target_window` .*: give its end$"),
    ({"target_window": ",2024-03-01"}, LOG, r"^`target_window` .*: give its start$"),
    ({"feature_window": ("2024-01-01", "2024-02-01", "2024-03-01")}, LOG, r"give \(start, end\), START,END or a"),
]


@pytest.mark.parametrize("arguments, log, message", BAD)
def test_bad_inputs_are_one_line_errors(arguments, log, message):
    with pytest.raises(DataError, match=message) as error:
        from_transactions(log, **{**WINDOWS, **arguments})
    assert "\n" not in str(error.value)


def test_the_cli_names_its_flags(tmp_path):
    LOG.to_csv(tmp_path / "log.csv", index=False)
    result = runner.invoke(app, ["value", "from-transactions", "--transactions", str(tmp_path / "log.csv"),
                                 "--out", str(tmp_path / "out"), "--feature-window", "2024-02-01,2024-01-01",
                                 "--target-window", "30D", "--customer", "cust"])
    assert result.exit_code == 2
    assert "--customer names no column" in " ".join(result.output.split())


def test_a_purchase_log_goes_to_a_quota_plan_in_a_notebook():
    """from_transactions → ValueModel.fit → score_table → pk.plan_quota, each taking what the one before returns."""
    import promokit as pk

    rng = np.random.default_rng(0)
    n = 4000
    log = pd.DataFrame({"customer_id": [f"c{i}" for i in rng.integers(0, 400, n)],
                        "time": pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 300, n), unit="D"),
                        "amount": rng.gamma(2.0, 20.0, n).round(2), "product": rng.choice(["x", "y", "z"], n)})
    tables = from_transactions(log, product="product", feature_window=(None, "2024-09-01"), target_window="60D")
    assert tables.users is tables["users"]
    model = ValueModel("hurdle", train={"progress": False}, split="random").fit(tables)  # one delivery time
    scores = model.score_table(tables)
    assert list(scores.columns) == ["user_id", "score_x", "score_y", "score_z"] and len(scores) == len(tables.users)
    size = len(scores) // 3
    quotas = pd.DataFrame({"fund": ["x", "y", "z"], "quota": [size, size, len(scores) - 2 * size]})
    plan = pk.plan_quota(scores, quotas, method="prices", seed=0)
    assert len(plan.plan) == len(scores) and plan.summary["gap"] <= 1e-9 * plan.summary["objective"]
    with pytest.raises(AttributeError, match="no table 'user'"):
        tables.user
