"""GMCM (Bao et al., SIGIR 2020) evaluation: CVR/CTCVR MSE, micro-behaviour node AUCs and RI in permille."""

import itertools
import math
import warnings
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

from promokit.conversion.evaluate import conversion_metrics
from promokit.data import FeatureSpec
from promokit.experiments.conversion import bench
from promokit.metrics import MetricWarning, auc, rela_impr, relative_improvement_permille

AUCS = ("cvr_auc", "ctcvr_auc", "ctcvr_gauc")
MSES = ("cvr_mse", "ctcvr_mse")

# --- conversion_metrics: MSE (eq. 21) and node AUCs ---------------------------------------------------------------

CLICK = np.array([1, 1, 0, 1, 1, 0.])
PURCHASE = np.array([1, 0, 0, 0, 1, 0.])
P_CTR = np.full(6, 0.5)
P_CVR = np.array([0.8, 0.3, 0.9, 0.5, 0.6, 0.1])


def _predictions(**extra):
    return {"p_ctr": P_CTR, "p_cvr": P_CVR, "p_ctcvr": P_CTR * P_CVR, **extra}


def test_cvr_mse_is_over_clicked_rows_and_ctcvr_mse_over_all_impressions():
    metrics = conversion_metrics({"click": CLICK, "purchase": PURCHASE}, _predictions())
    # clicked rows 0, 1, 3, 4: (1-.8)² + .3² + .5² + (1-.6)² = .04 + .09 + .25 + .16
    assert metrics["cvr_mse"] == pytest.approx(0.54 / 4)
    # p_ctcvr = .4 .15 .45 .25 .3 .05 against 1 0 0 0 1 0
    assert metrics["ctcvr_mse"] == pytest.approx((0.36 + 0.0225 + 0.2025 + 0.0625 + 0.49 + 0.0025) / 6)


def test_node_auc_is_over_clicked_rows_of_the_micro_label():
    labels = {"click": CLICK, "purchase": PURCHASE,
              "micro_cart": np.array([1, 0, 0, 1, 0, 0.]),  # rows 2 and 5 unclicked: no micro-behaviour
              "micro_fav": np.array([0, 0, 0, 0, 0, 0.])}
    # on unclicked rows p_node_cart is extreme: counted, it would change the AUC
    p_cart = np.array([0.7, 0.2, 0.99, 0.4, 0.5, 0.98])
    predictions = _predictions(p_node_cart=p_cart, p_node_fav=np.full(6, 0.3), p_node_share=np.full(6, 0.2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the one-class node is skipped, not warned about
        metrics = conversion_metrics(labels, predictions)
    # clicked: cart positives (0.7, 0.4) vs negatives (0.2, 0.5): 3 of 4 pairs ordered
    assert metrics["node_auc_cart"] == pytest.approx(0.75)
    assert metrics["node_auc_cart"] == pytest.approx(auc(labels["micro_cart"][CLICK == 1], p_cart[CLICK == 1]))
    assert "node_auc_fav" not in metrics       # a single class among clicked rows
    assert "node_auc_share" not in metrics     # a prediction without a micro_share label
    plain = conversion_metrics({"click": CLICK, "purchase": PURCHASE}, _predictions())
    assert list(metrics) == [*plain, "node_auc_cart"]  # the existing keys, unchanged and in order
    assert all(metrics[k] == plain[k] or math.isnan(plain[k]) for k in plain)


# --- RI in permille ------------------------------------------------------------------------------------------------

# GMCM Tables 2 and 3: per dataset, the baselines' metrics and printed RI, then GMCM's metrics.
TABLE_2 = {
    "SM-A": ({"Base": (0.8151, 0.8278, 0.7032, 9.71), "ESMM": (0.8163, 0.8283, 0.7051, 8.11),
              "Division": (0.8155, 0.8271, 0.6987, 12.05), "ResNet": (0.8146, 0.8230, 0.6959, 15.46),
              "DCN": (0.8169, 0.8304, 0.7021, 8.47)}, (0.8183, 0.8332, 0.7164)),
    "SM-B": ({"Base": (0.8249, 0.8357, 0.7063, 7.28), "ESMM": (0.8263, 0.8359, 0.7077, 5.94),
              "Division": (0.8208, 0.8317, 0.7072, 10.15), "ResNet": (0.8233, 0.8322, 0.7002, 12.27),
              "DCN": (0.8250, 0.8349, 0.7047, 8.29)}, (0.8300, 0.8417, 0.7123)),
    "SM-C": ({"Base": (0.8255, 0.8374, 0.7103, 8.83), "ESMM": (0.8305, 0.8412, 0.7119, 4.53),
              "Division": (0.8243, 0.8344, 0.7117, 9.91), "ResNet": (0.8272, 0.8364, 0.7037, 11.69),
              "DCN": (0.8313, 0.8420, 0.7115, 4.08)}, (0.8340, 0.8446, 0.7157)),
    "GUL-A": ({"Base": (0.7982, 0.8335, 0.7620, 9.98), "ESMM": (0.7973, 0.8298, 0.7634, 11.22),
               "Division": (0.7885, 0.8268, 0.7591, 18.08), "ResNet": (0.7934, 0.8321, 0.7609, 13.02),
               "DCN": (0.7969, 0.8337, 0.7639, 9.59)}, (0.8067, 0.8422, 0.7687)),
    "GUL-B": ({"Base": (0.8059, 0.8447, 0.7746, 8.83), "ESMM": (0.8066, 0.8421, 0.7728, 10.32),
               "Division": (0.8030, 0.8405, 0.7692, 14.04), "ResNet": (0.8050, 0.8402, 0.7683, 13.76),
               "DCN": (0.8080, 0.8451, 0.7732, 8.41)}, (0.8180, 0.8521, 0.7767)),
    "GUL-C": ({"Base": (0.8110, 0.8435, 0.7723, 10.37), "ESMM": (0.8080, 0.8441, 0.7767, 9.46),
               "Division": (0.8047, 0.8423, 0.7686, 15.07), "ResNet": (0.8112, 0.8491, 0.7738, 7.39),
               "DCN": (0.8088, 0.8433, 0.7721, 11.47)}, (0.8183, 0.8529, 0.7807)),
}
TABLE_3 = {
    "SM-A": ({"Base": (0.04496, 0.008125, 11.02), "ESMM": (0.04513, 0.008143, 13.98),
              "Division": (0.04470, 0.008111, 7.32), "ResNet": (0.04482, 0.008141, 10.49),
              "DCN": (0.04434, 0.008101, 2.65)}, (0.04411, 0.008099)),
    "SM-B": ({"Base": (0.04423, 0.008097, 4.25), "ESMM": (0.04417, 0.008103, 3.94),
              "Division": (0.04454, 0.008156, 11.35), "ResNet": (0.04431, 0.008108, 5.84),
              "DCN": (0.04444, 0.008102, 6.88)}, (0.04395, 0.008079)),
    "SM-C": ({"Base": (0.04395, 0.008094, 7.89), "ESMM": (0.04394, 0.008090, 7.485),
              "Division": (0.04400, 0.008103, 8.96), "ResNet": (0.04381, 0.008081, 5.37),
              "DCN": (0.04345, 0.008057, -0.12)}, (0.04340, 0.008068)),
    "GUL-A": ({"Base": (0.0778, 0.01739, 13.41), "ESMM": (0.0774, 0.01745, 12.17),
               "Division": (0.0811, 0.01764, 40.51), "ResNet": (0.0783, 0.01749, 18.97),
               "DCN": (0.0782, 0.01745, 17.84)}, (0.0763, 0.01726)),
    "GUL-B": ({"Base": (0.0770, 0.01731, 21.98), "ESMM": (0.0774, 0.01737, 26.44),
               "Division": (0.0787, 0.01745, 36.30), "ResNet": (0.0765, 0.01727, 17.73),
               "DCN": (0.0768, 0.01732, 21.11)}, (0.0746, 0.01708)),
    "GUL-C": ({"Base": (0.0758, 0.01717, 9.73), "ESMM": (0.0762, 0.01721, 13.06),
               "Division": (0.0783, 0.01740, 32.08), "ResNet": (0.0745, 0.01706, -2.16),
               "DCN": (0.0764, 0.01739, 19.89)}, (0.0748, 0.01708)),
}


def test_ri_of_table_2_sm_a_gmcm_vs_base_by_hand():
    gmcm, base = dict(zip(AUCS, (0.8183, 0.8332, 0.7164))), dict(zip(AUCS, (0.8151, 0.8278, 0.7032)))
    by_hand = 1000 * ((0.8183 - 0.8151) / 0.8151 + (0.8332 - 0.8278) / 0.8278 + (0.7164 - 0.7032) / 0.7032) / 3
    ri = relative_improvement_permille(gmcm, base, AUCS)
    assert ri == pytest.approx(by_hand)
    # The paper prints 9.71‰; its four-decimal AUCs give 9.74‰ (the paper computed from unrounded AUCs).
    assert round(ri, 2) == 9.74
    assert ri == pytest.approx(9.71, abs=0.05)
    # not the ESM²/DMBGN RelaImpr, which is relative to AUC − 0.5 (in percent: ×10 for permille)
    assert np.mean([rela_impr(gmcm[m], base[m]) for m in AUCS]) * 10 == pytest.approx(30.53, abs=0.01)


def test_ri_of_table_3_sm_a_gmcm_vs_base_by_hand():
    gmcm, base = dict(zip(MSES, (0.04411, 0.008099))), dict(zip(MSES, (0.04496, 0.008125)))
    by_hand = 1000 * ((0.04496 - 0.04411) / 0.04496 + (0.008125 - 0.008099) / 0.008125) / 2
    ri = relative_improvement_permille(gmcm, base, MSES, lower_is_better=True)
    assert ri == pytest.approx(by_hand)
    assert round(ri, 2) == 11.05          # the paper prints 11.02‰
    assert ri == pytest.approx(11.02, abs=0.05)
    # lower is better: a worse (higher) MSE is a negative RI; naming the metrics equals True for all
    assert relative_improvement_permille(base, gmcm, MSES, lower_is_better=True) < 0
    assert relative_improvement_permille(gmcm, base, MSES, lower_is_better=MSES) == pytest.approx(ri)


def _half_unit(x: float) -> float:
    """Half a unit of the last printed digit of ``x``: the rounding error of a value printed like it."""
    return 0.5 * 10.0 ** Decimal(repr(x)).as_tuple().exponent


def _rows(table, metrics, lower):
    for dataset, (baselines, gmcm) in table.items():
        for name, (*base, printed) in baselines.items():
            yield pytest.param(gmcm, tuple(base), printed, metrics, lower, id=f"{dataset}-{name}")


@pytest.mark.parametrize("gmcm, base, printed, metrics, lower",
                         [*_rows(TABLE_2, AUCS, False), *_rows(TABLE_3, MSES, True)])
def test_every_printed_ri_is_the_mean_relative_improvement_up_to_the_rounding_of_the_metrics(
        gmcm, base, printed, metrics, lower):
    """The RI of unrounded metrics that round to the printed ones ranges over an interval: the printed RI (itself
    rounded to 0.01‰) lies in it for all 60 cells of Tables 2–3."""
    values = []
    for signs in itertools.product((-1, 1), repeat=2 * len(metrics)):  # the corners bound a monotone function
        g = [x + s * _half_unit(x) for x, s in zip(gmcm, signs)]
        b = [x + s * _half_unit(x) for x, s in zip(base, signs[len(metrics):])]
        values.append(relative_improvement_permille(dict(zip(metrics, g)), dict(zip(metrics, b)), metrics, lower))
    assert min(values) - 0.005 <= printed <= max(values) + 0.005
    point = relative_improvement_permille(dict(zip(metrics, gmcm)), dict(zip(metrics, base)), metrics, lower)
    assert point == pytest.approx(printed, abs=0.6)


def test_ri_is_nan_with_a_warning_when_undefined():
    with pytest.warns(MetricWarning, match="RI is undefined"):
        assert math.isnan(relative_improvement_permille({"a": 0.7}, {"a": float("nan")}, ["a"]))
    with pytest.warns(MetricWarning):
        assert math.isnan(relative_improvement_permille({"a": 0.1}, {"a": 0.0}, ["a"], lower_is_better=True))
    with pytest.raises(ValueError):
        relative_improvement_permille({}, {}, [])


# --- bench: RI columns and the oracle's node AUCs --------------------------------------------------------------------

def _results():
    """Two seeds of three models whose means are SM-A of Tables 2–3 (Base, DCN, GMCM)."""
    means = {"base": (0.8151, 0.8278, 0.7032, 0.04496, 0.008125), "dcn": (0.8169, 0.8304, 0.7021, 0.04434, 0.008101),
             "gmcm": (0.8183, 0.8332, 0.7164, 0.04411, 0.008099)}
    rows = []
    for model, values in means.items():
        for seed, shift in ((0, -1e-4), (1, 1e-4)):
            rows.append({"model": model, "seed": seed, **{m: v + shift * v for m, v in zip(AUCS + MSES, values)},
                         "ctr_auc": 0.7, "ctcvr_logloss": 0.05, "fit_seconds": 1.0})
    return pd.DataFrame(rows)


def test_summarise_adds_ri_of_one_model_against_each_other_over_aucs_and_over_mses():
    results = _results()
    plain = bench.summarise(results, "base")
    assert not any(c.startswith("ri_permille") for c in plain.columns)
    table = bench.summarise(results, "base", metrics=bench.GMCM_TABLE, ri="gmcm")
    assert list(table.columns) == [*bench.GMCM_TABLE, "RelaImpr cvr_auc vs base", "RelaImpr ctcvr_auc vs base",
                                   "RelaImpr ctcvr_gauc vs base", "ri_permille_auc", "ri_permille_mse",
                                   "fit_seconds"]
    assert table.loc["base", "ri_permille_auc"] == "+9.74‰"    # the paper: 9.71‰
    assert table.loc["base", "ri_permille_mse"] == "+11.05‰"   # the paper: 11.02‰
    assert table.loc["dcn", "ri_permille_auc"] == "+8.48‰"     # the paper: 8.47‰
    assert table.loc["dcn", "ri_permille_mse"] == "+2.72‰"     # the paper: 2.65‰
    assert table.loc["gmcm", "ri_permille_auc"] == "—"
    assert table.loc["base", "ctcvr_mse"].startswith("0.008125 ± ")
    numbers = bench.relative_improvements(results, "gmcm")
    assert numbers.loc["base", "ri_permille_auc"] == pytest.approx(9.74, abs=0.005)
    assert math.isnan(numbers.loc["gmcm", "ri_permille_mse"])


def test_ri_group_without_its_metrics_is_left_out_with_a_warning():
    results = _results().drop(columns="ctcvr_gauc")
    with pytest.warns(UserWarning, match="no RI over auc"):
        table = bench.relative_improvements(results, "gmcm")
    assert list(table.columns) == ["ri_permille_mse"]
    with pytest.raises(KeyError, match="esmm"):
        bench.relative_improvements(results, "esmm")


def test_oracle_row_scores_the_true_node_probabilities():
    rng = np.random.default_rng(0)
    n = 400
    click = (rng.random(n) < 0.5).astype(float)
    p_cart = rng.uniform(0.1, 0.9, n)
    cart = click * (rng.random(n) < p_cart)
    purchase = click * (rng.random(n) < 0.2 + 0.5 * cart)
    test = pd.DataFrame({"user_id": rng.integers(0, 20, n), "segment": rng.integers(0, 3, n), "click": click,
                         "purchase": purchase, "cart": cart})
    truth = pd.DataFrame({"p_ctr": np.full(n, 0.5), "p_ctavr": np.full(n, 0.1), "p_cvr": 0.2 + 0.5 * p_cart,
                          "p_ctcvr": 0.5 * (0.2 + 0.5 * p_cart), "p_node_cart": p_cart,
                          "p_node_missing": np.full(n, 0.5)})
    spec = FeatureSpec(categorical=["segment"], micro_behaviors=["cart"])
    row = bench.oracle_row(test, truth, spec)
    clicked = click == 1
    assert row["node_auc_cart"] == pytest.approx(auc(cart[clicked], p_cart[clicked]))
    assert row["node_auc_cart"] > 0.6
    assert "node_auc_missing" not in row                  # no test column 'missing'
    assert row["cvr_mse"] == pytest.approx(np.mean((purchase[clicked] - truth.p_cvr[clicked]) ** 2))
    without = bench.oracle_row(test, truth.drop(columns=["p_node_cart", "p_node_missing"]), spec)
    assert set(row) - set(without) == {"node_auc_cart"}
