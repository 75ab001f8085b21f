import numpy as np
import pandas as pd
import pytest

from promokit.allocation.tables import read_budget_table, read_quota_table, read_quotas, score_frame
from promokit.data import DataError
from promokit.experiments.allocation.instances import DEFAULT_LEVELS, make_budget_instance, make_quota_instance


# --- synthetic instances -------------------------------------------------------------------------------

def test_budget_instance_is_the_hazard_response_increasing_and_concave_in_the_level():
    instance = make_budget_instance(500, seed=3)
    assert instance.scores.shape == (500, len(DEFAULT_LEVELS))
    hazard = instance.baseline[:, None] + instance.sensitivity[:, None] * instance.levels
    np.testing.assert_allclose(instance.scores, 1 - np.exp(-hazard))
    assert np.all((instance.scores > 0) & (instance.scores < 1))
    slopes = np.diff(instance.scores, axis=1) / np.diff(instance.levels)
    assert np.all(slopes > 0) and np.all(np.diff(slopes, axis=1) < 0)
    # heterogeneous sensitivity: the gain from the lowest to the highest level varies a lot between requests
    gain = instance.scores[:, -1] - instance.scores[:, 0]
    assert np.percentile(gain, 90) > 3 * np.percentile(gain, 10)


def test_instances_are_reproducible_from_the_seed_and_float32_capable():
    a, b = make_budget_instance(100, seed=7), make_budget_instance(100, seed=7)
    np.testing.assert_array_equal(a.scores, b.scores)
    assert not np.array_equal(a.scores, make_budget_instance(100, seed=8).scores)
    single = make_budget_instance(100, seed=7, dtype=np.float32)
    assert single.scores.dtype == np.float32
    np.testing.assert_allclose(single.scores, a.scores, rtol=1e-5)
    q32, q64 = make_quota_instance(300, seed=1, dtype=np.float32), make_quota_instance(300, seed=1)
    assert q32.etv.dtype == np.float32
    np.testing.assert_allclose(q32.etv, q64.etv, rtol=1e-4)
    np.testing.assert_array_equal(q32.quotas, q64.quotas)


def test_quota_instance_is_feasible_under_the_risk_rule():
    instance = make_quota_instance(5000, n_types=8, seed=0)
    assert instance.etv.shape == (5000, 8) and np.all(instance.etv >= 0)
    assert instance.quotas.sum() == 5000
    assert set(np.unique(instance.tolerance)) == {1, 2, 3, 4, 5}
    assert instance.risk.min() == 1 and instance.risk.max() <= 5
    # Hall's condition for nested eligibility (t_i ≥ r_j): enough tolerant users for every risk level
    for level in np.unique(instance.risk):
        assert instance.quotas[instance.risk >= level].sum() <= np.count_nonzero(instance.tolerance >= level)


def test_quota_instance_mixes_strong_preferences_with_near_indifference():
    etv = make_quota_instance(20_000, seed=2).etv
    ordered = np.sort(etv, axis=1)
    margin = (ordered[:, -1] - ordered[:, -2]) / ordered[:, -1]
    assert np.mean(margin < 0.1) > 0.3      # many users barely prefer their best fund
    assert np.mean(margin > 0.5) > 0.02     # some users strongly prefer one fund


@pytest.mark.parametrize("call, message", [
    (lambda: make_budget_instance(0), "n_requests must be a positive integer"),
    (lambda: make_budget_instance(10, levels=(2.0, 1.0)), "levels must be non-negative, unique and increasing"),
    (lambda: make_quota_instance(10, n_types=0), "n_types must be a positive integer"),
])
def test_generator_arguments_are_checked(call, message):
    with pytest.raises(DataError, match=message):
        call()


# --- reading score tables ------------------------------------------------------------------------------

@pytest.fixture
def budget_instance():
    return make_budget_instance(6, levels=(0.5, 1.0, 2.0), seed=0)


def _budget_frame(instance, layout, **matrices):
    return score_frame(np.arange(100, 106), instance.levels, {"score": instance.scores, **matrices}, "level", layout)


@pytest.mark.parametrize("layout", ["long", "wide"])
def test_budget_table_round_trips_in_both_layouts(budget_instance, layout):
    cost = budget_instance.scores * 3
    frame = _budget_frame(budget_instance, layout, cost=cost)
    table = read_budget_table(frame.sample(frac=1, random_state=0) if layout == "long" else frame)
    assert table.layout == layout
    order = np.argsort(table.user_ids)
    np.testing.assert_array_equal(table.user_ids[order], np.arange(100, 106))
    np.testing.assert_allclose(table.levels, [0.5, 1.0, 2.0])
    np.testing.assert_allclose(table.scores[order], budget_instance.scores)
    np.testing.assert_allclose(table.cost[order], cost)
    assert table.value is None


def test_wide_column_names_and_custom_prefix(budget_instance, tmp_path):
    frame = _budget_frame(budget_instance, "wide")
    assert list(frame.columns) == ["user_id", "score_0.5", "score_1", "score_2"]
    path = tmp_path / "etv.csv"
    frame.rename(columns=lambda c: c.replace("score_", "p_")).to_csv(path, index=False)
    np.testing.assert_allclose(read_budget_table(path, prefix="p_").scores, budget_instance.scores)


def test_quota_tables_read_tolerance_and_align_quotas_with_funds():
    instance = make_quota_instance(40, n_types=3, seed=0)
    for layout in ("long", "wide"):
        frame = score_frame([f"u{i}" for i in range(40)], instance.funds, {"score": instance.etv}, "fund", layout,
                            per_user={"tolerance": instance.tolerance})
        table = read_quota_table(frame)
        assert table.funds == ["F1", "F2", "F3"]
        np.testing.assert_allclose(table.etv, instance.etv)
        np.testing.assert_array_equal(table.tolerance, instance.tolerance)
    shuffled = pd.DataFrame({"fund": ["F3", "F1", "F2"], "quota": [5, 20, 15], "risk": [3, 1, 2]})
    quotas = read_quotas(shuffled, ["F1", "F2", "F3"])
    np.testing.assert_array_equal(quotas.quotas, [20, 15, 5])
    np.testing.assert_array_equal(quotas.risk, [1, 2, 3])


def _long(budget_instance):
    return _budget_frame(budget_instance, "long")


def _wide(budget_instance):
    return _budget_frame(budget_instance, "wide")


@pytest.mark.parametrize("layout, edit, message", [
    ("long", lambda f: f.rename(columns={"score": "scores"}), "column 'score' .* missing .* did you mean 'scores'"),
    ("long", lambda f: f.rename(columns={"level": "levle"}), "column 'level' .* did you mean 'levle'"),
    ("wide", lambda f: f.rename(columns={"user_id": "userid"}), "column 'user_id' .* did you mean 'userid'"),
    ("long", lambda f: f.assign(score=f.score.where(f.index != 4, np.nan)),
     r"column 'score' has missing, non-numeric, infinite or negative values: 1 of 18 rows .* row 4 \{user_id=101"),
    ("long", lambda f: f.assign(score=f.score.where(f.index != 4, -0.1)), "1 of 18 rows .*score=-0.1"),
    ("wide", lambda f: f.assign(score_1=f.score_1.where(f.index != 2, -1.0)),
     r"column 'score_1' has .* negative values: 1 of 6 rows .* row 2 \{user_id=102, score_1=-1.0\}"),
    ("long", lambda f: pd.concat([f, f.iloc[[7]]], ignore_index=True),
     r"duplicate \(user_id, level\) pairs: 2 of 19 rows .*row 7 \{user_id=102, level=1.0\}"),
    ("long", lambda f: f.drop(index=[3, 7]).reset_index(drop=True),
     "2 of 6 users lack rows for some of the 3 level values .* user_id=101 has no row for level=0.5"),
    ("long", lambda f: f.assign(level=f.level.astype(object).where(f.index != 1, "one")),
     r"column 'level' has missing, non-numeric or infinite values: 1 of 18 rows .*level='one'"),
    ("wide", lambda f: f.assign(scor_4=1.0), "1 unknown columns in the wide table of 6 rows, e.g. 'scor_4'; did you mean"),
    ("wide", lambda f: f.assign(segment="a"), "unknown columns .* 'segment'"),
    ("wide", lambda f: f.assign(user_id=[1, 2, 3, 3, 4, 5]), "column 'user_id' repeats users: 2 of 6 rows"),
    ("wide", lambda f: f[["user_id", "score_1", "score_0.5", "score_2"]], "levels must be unique and increasing"),
    ("wide", lambda f: f.assign(**{"score_1.0": f.score_1}), "levels must be unique and increasing"),
    ("wide", lambda f: f.rename(columns={"score_2": "score_high"}), "do not end in a number .* 'score_high'"),
    ("wide", lambda f: f.assign(cost_1=1.0), "columns cost_\\* must match the score columns"),
    ("wide", lambda f: f.drop(columns=["score_0.5", "score_1", "score_2"]), "column 'score_<level>' .* missing"),
])
def test_every_budget_table_error_names_the_column_the_count_and_an_example(budget_instance, layout, edit, message):
    frame = edit(_long(budget_instance) if layout == "long" else _wide(budget_instance))
    with pytest.raises(DataError, match=message):
        read_budget_table(frame, layout=layout)


def test_long_tolerance_must_be_the_same_on_every_row_of_a_user():
    frame = pd.DataFrame({"user_id": [1, 1, 2, 2], "fund": ["A", "B", "A", "B"], "score": [1.0, 2, 3, 4],
                          "tolerance": [3, 3, 2, 5]})
    with pytest.raises(DataError, match=r"column 'tolerance' differs between rows of the same user: 1 of 4 rows .*row 3"):
        read_quota_table(frame)
    with pytest.raises(DataError, match="tolerance must be whole numbers"):
        read_quota_table(frame.assign(tolerance=[2.5, 2.5, 1, 1]))


@pytest.mark.parametrize("quotas, message", [
    ({"fund": ["A", "B", "C"], "quota": [1, 1, 0]}, "1 funds that are not in the score table, e.g. 'C'"),
    ({"fund": ["A"], "quota": [2]}, "1 funds of the score table have no quota .* e.g. 'B'"),
    ({"fund": ["A", "A", "B"], "quota": [1, 1, 0]}, "column 'fund' repeats a fund: 2 of 3 rows"),
    ({"fund": ["A", "B"], "quota": [1, -1]}, "column 'quota' has .* negative values: 1 of 2 rows"),
    ({"fund": ["A", "B"], "quota": [1.5, 0.5]}, "quota must be whole numbers"),
    ({"fund": ["A", "B"], "quotas": [1, 1]}, "column 'quota' .* did you mean 'quotas'"),
])
def test_quotas_table_errors(quotas, message):
    with pytest.raises(DataError, match=message):
        read_quotas(pd.DataFrame(quotas), ["A", "B"])


def test_empty_and_unknown_layouts_are_errors(budget_instance):
    with pytest.raises(DataError, match="no rows"):
        read_budget_table(pd.DataFrame({"user_id": [], "level": [], "score": []}))
    with pytest.raises(DataError, match="layout must be"):
        read_budget_table(_long(budget_instance), layout="tall")
