"""Calibration reporting (issue 30): the decile table, the per-group table, the expected calibration error and the
warning beyond CALIBRATION_RATIO. Each domain's evaluate carrying them is tested with its own fixtures."""

import warnings

import numpy as np
import pandas as pd
import pytest

from promokit.metrics import (
    CALIBRATION_RATIO,
    CalibrationWarning,
    calibration_by,
    calibration_report,
    calibration_table,
    calibration_warning,
    expected_calibration_error,
    worst_first,
)


def test_the_decile_table_and_ece_by_hand():
    # sorted by p: 0.1 (0), 0.2 (0), 0.5 (1) | 0.8 (0), 0.9 (1) — the first bin takes the odd row
    p, y = [0.5, 0.1, 0.2, 0.9, 0.8], [1, 0, 0, 1, 0]
    table = calibration_table(p, y, bins=2)
    assert table["rows"].tolist() == [3, 2]
    np.testing.assert_allclose(table["mean_predicted"], [0.8 / 3, 0.85])
    np.testing.assert_allclose(table["mean_observed"], [1 / 3, 0.5])
    np.testing.assert_allclose(table["ratio"], [0.8, 1.7])
    # 3/5 · |1/3 − 0.8/3| + 2/5 · |0.5 − 0.85| = 0.04 + 0.14
    assert expected_calibration_error(p, y, bins=2) == pytest.approx(0.18)
    assert expected_calibration_error([0.1, 0.2, 0.3, 0.4], [0, 0, 1, 1], bins=2) == pytest.approx(0.4)
    assert np.isnan(calibration_table([0.1, 0.2], [0, 0], bins=2)["ratio"]).all()  # nothing observed: no ratio


def test_a_calibrated_prediction_has_zero_ece_and_ratio_one():
    p = np.repeat([0.1, 0.3], 10)
    y = np.r_[np.ones(1), np.zeros(9), np.ones(3), np.zeros(7)]
    assert expected_calibration_error(p, y, bins=2) == pytest.approx(0.0)
    report = calibration_report(p, y, "p")
    assert report.metrics["calibration_ratio"] == pytest.approx(1.0) and report.warning is None


def test_calibration_by_group_in_key_order():
    table = calibration_by([0.2, 0.4, 0.1, 0.3], [1, 0, 0, 0], ["b", "a", "b", "a"], name="campaign")
    assert table["campaign"].tolist() == ["a", "b"] and table["rows"].tolist() == [2, 2]
    np.testing.assert_allclose(table["mean_predicted"], [0.35, 0.15])
    np.testing.assert_allclose(table["mean_observed"], [0.0, 0.5])
    assert np.isnan(table["ratio"].iloc[0]) and table["ratio"].iloc[1] == pytest.approx(0.3)
    unkeyed = calibration_by([0.1, 0.2, 0.3], [0, 1, 1], pd.Series(["a", None, None]))
    assert unkeyed["rows"].tolist() == [1, 2] and unkeyed["group"].isna().tolist() == [False, True]
    np.testing.assert_allclose(table["ece"], [0.35, 0.45])  # one row per bin: a off by 0.4, 0.3; b by 0.1, 0.8


def test_the_report_lists_the_worst_group_first_with_its_ece_and_new_groups():
    p = np.r_[np.full(10, 0.1), np.full(10, 0.1), np.full(10, 0.1), np.full(10, 0.1)]
    y = np.r_[np.ones(1), np.zeros(9),   # ratio 1
              np.ones(4), np.zeros(6),   # predicted a quarter of the observed: ratio 0.25
              np.zeros(10),              # nothing observed: no ratio
              np.ones(2), np.zeros(8)]   # ratio 0.5
    groups = np.repeat(["fine", "quarter", "none", "half"], 10)
    report = calibration_report(p, y, "p", groups=groups, by="campaign", bins=1, new_groups=["half", "elsewhere"])
    table = report.tables["calibration_by_campaign"]
    assert table["campaign"].tolist() == ["quarter", "half", "fine", "none"] and table["rows"].tolist() == [10] * 4
    np.testing.assert_allclose(table["ece"], [0.3, 0.1, 0.0, 0.1], atol=1e-12)
    assert table["new"].tolist() == [False, True, False, False]
    high = worst_first(calibration_by([0.4, 0.1, 0.0], [0.1, 0.2, 0.3], ["4x high", "2x low", "zero"]))
    assert high["group"].tolist() == ["zero", "4x high", "2x low"]


def test_the_warning_fires_at_seven_times_low_and_is_silent_when_calibrated():
    line = calibration_warning(0.010, 0.070, "voucher p_redeem")
    assert line.startswith("voucher p_redeem is not calibrated") and "7× low" in line and "\n" not in line
    assert "3× high" in calibration_warning(0.3, 0.1, "p")
    assert calibration_warning(0.069, 0.070, "p") is None
    assert calibration_warning(0.07 * CALIBRATION_RATIO, 0.070, "p") is None  # the limit itself is within
    assert calibration_warning(0.010, 0.0, "p") is None  # nothing observed: no ratio to judge
    assert calibration_warning(0.010, 0.070, "p", events=20) is None  # too few events to judge
    with pytest.raises(ValueError, match="limit must be a ratio above 1"):
        calibration_warning(0.01, 0.07, "p", limit=0.5)


def test_the_report_warns_beyond_the_ratio_with_its_tables():
    y = (np.arange(2000) % 100 < 7).astype(float)  # 7 % in every decile: 140 events, enough to judge
    groups = np.arange(2000) % 2
    with pytest.warns(CalibrationWarning, match="^voucher p_redeem is not calibrated.*7× low"):
        report = calibration_report(np.full(2000, 0.01), y, "voucher p_redeem", groups=groups, by="campaign_id")
    assert report.metrics == pytest.approx({"mean_predicted": 0.01, "mean_observed": 0.07,
                                            "calibration_ratio": 0.01 / 0.07, "ece": 0.06})
    assert set(report.tables) == {"calibration", "calibration_by_campaign_id"}
    assert report.tables["calibration_by_campaign_id"]["rows"].tolist() == [1000, 1000]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        calm = calibration_report(np.full(2000, 0.07), y, "p", prefix="ctr_")
    assert calm.warning is None and set(calm.metrics) == {"ctr_mean_predicted", "ctr_mean_observed",
                                                          "ctr_calibration_ratio", "ctr_ece"}
    assert list(calm.tables) == ["ctr_calibration"]


def test_the_report_on_few_or_no_rows():
    few = calibration_report([0.2, 0.9, 0.4], [0, 1, 1], "p")
    assert few.tables["calibration"]["rows"].tolist() == [1, 1, 1]  # one bin per row under ten rows
    none = calibration_report(np.zeros(0), np.zeros(0), "p")
    assert np.isnan(list(none.metrics.values())).all() and none.tables == {}


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(ValueError, match="y must be non-negative"):
        calibration_by([0.1], [-1], ["a"])
    with pytest.raises(ValueError, match="p must be finite"):
        calibration_table([np.nan], [0], bins=1)
    with pytest.raises(ValueError, match="groups must have the same length as p"):
        calibration_by([0.1, 0.2], [0, 1], ["a"])
    with pytest.raises(ValueError, match="need at least 10 rows for 10 bins"):
        expected_calibration_error([0.1], [0])
    with pytest.raises(ValueError, match="p and y must have the same length"):
        calibration_table([0.1], [0, 1], bins=1)


def test_the_evaluate_command_writes_the_calibration_tables(tmp_path):
    import json

    from conftest import make_impressions
    from typer.testing import CliRunner

    from promokit.cli import app

    table = tmp_path / "impressions.csv"
    make_impressions().to_csv(table, index=False)
    runner = CliRunner()
    trained = runner.invoke(app, ["conversion", "train", "--data", str(table), "--out", str(tmp_path / "m"),
                                  "--model", "lr"])
    assert trained.exit_code == 0, trained.output
    result = runner.invoke(app, ["conversion", "evaluate", "--model", str(tmp_path / "m"), "--data", str(table),
                                 "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert {"calibration", "ctr_calibration", "cvr_calibration"} <= set(report)
    assert "ece" in report["metrics"] and "## Calibration" in (tmp_path / "r" / "report.md").read_text()
