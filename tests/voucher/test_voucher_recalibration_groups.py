"""A voucher model recalibrated by campaign (issue 38, item 6): one map per campaign shrunk toward the overall one,
applied per session at predict, kept through save / load and the CLI, and named in evaluate's table when a campaign
was new."""

import json
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.voucher.world import PROFILE_CATEGORICAL, make_world
from promokit.training.recalibration import RECALIBRATION_FILE, GroupRecalibration, read_recalibration
from promokit.voucher.estimator import VoucherModel


@pytest.fixture(scope="module")
def tables():
    """A small world whose sessions carry a campaign (three, by voucher)."""
    world = make_world(n_users=200, n_vouchers=20, n_items=200, n_sessions=1500, seed=2)
    sessions = world.tables.sessions
    return replace(world.tables, sessions=sessions.assign(campaign_id=sessions.voucher_id % 3))


@pytest.fixture(scope="module")
def recalibrated(tables):
    model = VoucherModel("lr", test_fraction=0.3).fit(tables)
    return model.recalibrate(tables, method="platt", rows=model.held_out(tables), by="campaign_id")


def test_predict_maps_each_session_by_its_campaign_and_save_load_predicts_the_same(tables, recalibrated, tmp_path):
    rows = recalibrated.held_out(tables)
    out = recalibrated.predict(tables, rows=rows)
    keys = tables.sessions["campaign_id"].to_numpy()[rows]
    recalibration = recalibrated.recalibration_
    assert isinstance(recalibration, GroupRecalibration) and set(recalibration.groups) == {0, 1, 2}
    np.testing.assert_allclose(out["p_redeem"], recalibration.apply(out["p_redeem_raw"], keys))
    assert not np.allclose(out["p_redeem"], recalibration.overall.apply(out["p_redeem_raw"]))
    recalibrated.save(tmp_path / "m")
    saved = json.loads((tmp_path / "m" / RECALIBRATION_FILE).read_text())
    assert saved["by"] == "campaign_id" and sorted(g["key"] for g in saved["groups"]) == [0, 1, 2]
    loaded = VoucherModel.load(tmp_path / "m")
    np.testing.assert_allclose(loaded.predict(tables, rows=rows)["p_redeem"], out["p_redeem"], rtol=1e-6)


def test_a_new_campaign_gets_the_overall_map_with_a_warning_and_evaluate_marks_it(tables, recalibrated):
    rows = recalibrated.held_out(tables)
    sessions = tables.sessions.copy()
    sessions.loc[rows[:50], "campaign_id"] = 99
    later = replace(tables, sessions=sessions)
    with pytest.warns(UserWarning, match=rf"^50 of {len(rows):,} sessions are in 1 campaign_id values the "
                                         r"recalibration was not fitted on \(99\): they get its overall map$"):
        out = recalibrated.predict(later, rows=rows)
    overall = recalibrated.recalibration_.overall
    np.testing.assert_allclose(out["p_redeem"][:50], overall.apply(out["p_redeem_raw"][:50]))
    with pytest.warns(UserWarning, match="not fitted on"):
        table = recalibrated.evaluate(later, rows=rows).tables["calibration_by_campaign_id"]
    assert table.set_index("campaign_id")["new"].to_dict() == {0: False, 1: False, 2: False, 99: True}


def test_recalibrate_by_names_a_missing_column_and_predict_needs_it(tables, recalibrated):
    with pytest.raises(DataError, match=r"^`by`: no column 'fund' in sessions \(they keep the ids"):
        recalibrated.recalibrate(tables, by="fund")
    with pytest.raises(DataError, match="^the recalibration is by 'campaign_id', a column the sessions lack"):
        recalibrated.predict(replace(tables, sessions=tables.sessions.drop(columns="campaign_id")))


def test_cli_recalibrate_by_a_sessions_column(tables, tmp_path):
    """From files the sessions keep their ids and features only: recalibrate by voucher_id."""
    tables.sessions.to_csv(tmp_path / "sessions.csv", index=False)
    tables.events.drop(columns=["session", "pre"]).to_csv(tmp_path / "events.csv", index=False)
    tables.items.to_parquet(tmp_path / "items.parquet", index=False)
    VoucherModel("lr", test_fraction=0.3).fit(tables).save(tmp_path / "model")
    args = ["voucher", "recalibrate", "--model", tmp_path / "model", "--sessions", tmp_path / "sessions.csv",
            "--events", tmp_path / "events.csv", "--items", tmp_path / "items.parquet",
            "--categorical", ",".join(PROFILE_CATEGORICAL), "--from", "2024-05-01"]
    runner = CliRunner()
    result = runner.invoke(app, [str(a) for a in [*args, "--by", "voucher_id"]])
    assert result.exit_code == 0, result.output
    saved = read_recalibration(tmp_path / "model")
    assert isinstance(saved, GroupRecalibration) and saved.by == "voucher_id"
    vouchers = tables.sessions.loc[tables.sessions.collect_time >= "2024-05-01", "voucher_id"].nunique()
    assert len(saved.groups) == vouchers
    assert f"by voucher_id ({vouchers} values, {saved.fitted_on['own_maps']} with a map of their own)" in " ".join(
        result.output.split())
    missing = runner.invoke(app, [str(a) for a in [*args, "--by", "campaign_id"]])
    assert missing.exit_code == 2 and "--by: no column 'campaign_id' in sessions" in " ".join(missing.output.split())
