"""``voucher predict``'s summary.json lists the output columns it wrote, with their means: p_redeem, and p_redeem_raw
too for a recalibrated model, on one table and over parts."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.cli import app
from promokit.experiments.voucher.world import make_world
from promokit.voucher.estimator import VoucherModel

runner = CliRunner()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The world's tables as files, an LR model (``plain``) and the same model recalibrated (``recalibrated``)."""
    folder = tmp_path_factory.mktemp("voucher_summary")
    tables = make_world(n_users=120, n_vouchers=15, n_items=100, n_sessions=800, seed=3).tables
    model = VoucherModel("lr").fit(tables)
    model.save(folder / "plain")
    model.recalibrate(tables, method="prior-shift", rows=model.held_out(tables)).save(folder / "recalibrated")
    tables.sessions.to_parquet(folder / "sessions.parquet", index=False)
    tables.events.drop(columns=["session", "pre"]).to_parquet(folder / "events.parquet", index=False)
    tables.items.to_parquet(folder / "items.parquet", index=False)
    for name, frame in (("sessions", tables.sessions), ("events", tables.events.drop(columns=["session", "pre"]))):
        users = frame["user_id"] if "user_id" in frame else frame["session_id"].map(
            dict(zip(tables.sessions["session_id"], tables.sessions["user_id"])))
        (folder / f"{name}_parts").mkdir()
        for k in range(2):  # by user: every session of a user, and its events, in one part
            frame[(users % 2 == k).to_numpy()].to_parquet(folder / f"{name}_parts" / f"part-{k:05d}.parquet",
                                                            index=False)
    return folder


def _predict(folder, model: str, sessions: str, events: str, out):
    result = runner.invoke(app, [str(a) for a in ["voucher", "predict", "--model", folder / model, "--sessions",
                                                  folder / sessions, "--events", folder / events, "--items",
                                                  folder / "items.parquet", "--out", out]])
    assert result.exit_code == 0, result.output
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("model, outputs", [("plain", ["p_redeem"]), ("recalibrated", ["p_redeem", "p_redeem_raw"])])
def test_the_summary_lists_the_columns_written_with_their_means(folder, tmp_path, model, outputs):
    summary = _predict(folder, model, "sessions.parquet", "events.parquet", tmp_path / "one")
    predictions = pd.read_parquet(tmp_path / "one" / "predictions.parquet")
    assert summary["outputs"] == outputs == [c for c in predictions.columns if c.startswith("p_")]
    assert summary["means"] == pytest.approx({c: predictions[c].mean() for c in outputs}, rel=1e-12)
    if model == "recalibrated":
        assert summary["means"]["p_redeem"] != pytest.approx(summary["means"]["p_redeem_raw"], rel=1e-3)

    in_parts = _predict(folder, model, "sessions_parts", "events_parts", tmp_path / "parts")
    assert in_parts["parts"] == 2 and in_parts["rows"] == summary["rows"] == len(predictions)
    assert in_parts["outputs"] == outputs
    assert in_parts["means"] == pytest.approx(summary["means"], rel=1e-9)
