"""``from_transactions`` counts the customers it leaves out — those who bought in the target window only, with no
feature-window history — in its summary and in ``value from-transactions``' output."""

import pandas as pd
from typer.testing import CliRunner

from promokit.cli import app
from promokit.value.transactions import from_transactions

LOG = pd.DataFrame({
    "customer_id": ["a", "a", "b", "c", "c", "d", "e", "e"],
    "time": ["2024-01-03", "2024-02-05", "2024-01-20", "2024-02-10", "2024-02-11", "2024-02-20", "2023-12-01",
             "2024-02-01"],
    "amount": [10.0, 20.0, 5.0, 7.0, 8.0, 9.0, 4.0, 6.0],
})
#: a and b have a history; c and d buy in the target window only; e's history is before the feature window
WINDOWS = {"feature_window": ("2024-01-01", "2024-02-01"), "target_window": ("2024-02-01", "2024-03-01")}


def test_the_customers_of_the_target_window_alone_are_counted():
    tables = from_transactions(LOG, **WINDOWS)
    assert sorted(tables["users"].user_id) == ["a", "b"]
    assert (tables.new_customers, tables.target_customers) == (3, 4)  # c, d, e of a, c, d, e
    assert tables.summary() == {"customers": 2, "funds": 1, "deliveries": 2, "spend_share": 0.5, "behaviors": 2,
                                "new_customers": 3, "target_customers": 4}
    whole = from_transactions(LOG, feature_window=(None, "2024-02-01"), target_window=WINDOWS["target_window"])
    assert (whole.new_customers, whole.target_customers) == (2, 4)  # e's December purchase is history now


def test_the_cli_says_how_many_it_left_out(tmp_path):
    LOG.to_csv(tmp_path / "log.csv", index=False)
    result = CliRunner().invoke(app, ["value", "from-transactions", "--transactions", str(tmp_path / "log.csv"),
                                      "--out", str(tmp_path / "data"), "--feature-window", "2024-01-01,2024-02-01",
                                      "--target-window", "29D"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "2 customers, 1 fund, 2 deliveries (50.0% spend in the target window)" in said
    assert "left out: 3 of the 4 customers of the target window, with no purchase in the feature window" in said
