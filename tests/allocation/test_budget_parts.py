"""Budget allocation over a partitioned score table (eqs. 11–20): the same λ*, bound and choices as in memory."""

import json
import pickle

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.allocation import budget as budget_module
from promokit.allocation.budget import ArrayPart, absolute_form, ratio_form, solve_budget
from promokit.allocation.budget_parts import BudgetPart, solve_budget_parts
from promokit.allocation.tables import LEVEL, score_frame
from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.allocation.instances import make_budget_instance

N_ROWS = 30_000  # above DIRECT_ROWS and 2·sample: the sampled path


@pytest.fixture(scope="module")
def instance():
    return make_budget_instance(N_ROWS, seed=11)


def cuts(n_parts, n_rows=N_ROWS, seed=0, empty=True):
    """Uneven part boundaries, one part empty when ``empty``."""
    inner = np.sort(np.random.default_rng(seed).choice(np.arange(1, n_rows), n_parts - 1, replace=False))
    if empty:
        inner[1] = inner[2]
    return [0, *inner.tolist(), n_rows]


def pickling_map(fn, items):
    """builtin map through pickle both ways, as a process-based executor would run it, counting the calls."""
    pickling_map.calls += 1
    return [pickle.loads(pickle.dumps(pickle.loads(pickle.dumps(fn))(pickle.loads(pickle.dumps(item)))))
            for item in items]


def assert_same_plan(parts_plan, local):
    plan = parts_plan.plan
    assert plan.lagrange_path == local.lagrange_path and plan.sweeps == local.sweeps
    assert plan.lam == pytest.approx(local.lam, rel=1e-9, abs=1e-15)
    assert plan.objective == pytest.approx(local.objective, rel=1e-9)
    assert plan.upper_bound == pytest.approx(local.upper_bound, rel=1e-9)
    assert plan.spent == pytest.approx(local.spent, rel=1e-9, abs=1e-9)
    np.testing.assert_array_equal(np.concatenate(parts_plan.outputs), local.choice)


def write_parts(scores, levels, edges, folder):
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        paths.append(folder / f"part-{i:05d}.parquet")
        score_frame(np.arange(lo, hi), levels, {"score": scores[lo:hi]}, LEVEL).to_parquet(paths[-1], index=False)
    return paths


# ---------------------------------------------------------------------------------------- solver, in memory


@pytest.mark.parametrize("edges", [[0, N_ROWS], cuts(9), cuts(25, seed=3)], ids=["one", "nine", "twenty-five"])
@pytest.mark.parametrize("sample_size", [None, 15_000], ids=["sampled", "direct"])
def test_array_parts_give_the_local_plan(instance, edges, sample_size):
    value, cost, budget = ratio_form(instance.scores, instance.levels, 3.0)
    local = solve_budget(value, cost, budget, sample_size=sample_size, seed=4)
    parts = [ArrayPart(value[lo:hi], cost[lo:hi]) for lo, hi in zip(edges[:-1], edges[1:])]
    pickling_map.calls = 0
    partitioned = solve_budget_parts(parts, budget, map_parts=pickling_map, sample_size=sample_size, seed=4)
    assert_same_plan(partitioned, local)
    assert partitioned.plan.choice is None
    # counts, (sample, sweep | gather), choices
    assert pickling_map.calls == (4 if sample_size is None else 3)


@pytest.mark.parametrize("misses", [1, 2])
def test_a_missed_bracket_is_widened_the_same_way(instance, monkeypatch, misses):
    value, cost, _ = absolute_form(instance.scores, instance.levels, 0.0)
    total = float(cost.min(axis=1).sum() + 0.3 * (cost.max(axis=1) - cost.min(axis=1)).sum())
    exact = solve_budget(value, cost, total, sample_size=N_ROWS)  # every request hulled
    bracket = budget_module._Hull.bracket

    def missing(hull, share, width):  # the first `misses` brackets lie wholly below λ*: step 3's λ* is outside
        if width in budget_module.BRACKET_WIDTHS[:misses]:
            return exact.lam * 0.3, exact.lam * 0.33
        return bracket(hull, share, width)

    monkeypatch.setattr(budget_module._Hull, "bracket", missing)
    local = solve_budget(value, cost, total, sample_size=200, seed=1)
    assert local.sweeps == misses + 1 and local.lam == pytest.approx(exact.lam, rel=1e-9)
    parts = [ArrayPart(value[lo:hi], cost[lo:hi]) for lo, hi in zip(cuts(7)[:-1], cuts(7)[1:])]
    assert_same_plan(solve_budget_parts(parts, total, sample_size=200, seed=1), local)


def test_an_infeasible_budget_names_a_request_by_its_global_index(instance):
    value, cost, _ = absolute_form(instance.scores, instance.levels, 0.0)
    edges = cuts(5)
    parts = [ArrayPart(value[lo:hi], cost[lo:hi]) for lo, hi in zip(edges[:-1], edges[1:])]
    with pytest.raises(DataError) as local:
        solve_budget(value, cost, 1.0)
    with pytest.raises(DataError) as partitioned:
        solve_budget_parts(parts, 1.0)
    assert str(partitioned.value) == str(local.value)
    assert "budget 1 is infeasible" in str(local.value)


def test_parts_without_requests_are_an_error():
    with pytest.raises(DataError, match="the 2 parts hold no requests"):
        solve_budget_parts([ArrayPart(np.empty((0, 3)), np.empty((0, 3)))] * 2, 0.0)


# ------------------------------------------------------------------------------------- a narrowed bracket

GATHER = 200  # well below the ≈ 10³ requests the sample's bracket leaves undecided at N_ROWS: narrowed first


def array_parts(value, cost, edges):
    return [ArrayPart(value[lo:hi], cost[lo:hi]) for lo, hi in zip(edges[:-1], edges[1:])]


@pytest.mark.parametrize("edges", [[0, N_ROWS], cuts(9), cuts(25, seed=3)], ids=["one", "nine", "twenty-five"])
@pytest.mark.parametrize("form", ["ratio", "absolute"])
def test_a_narrowed_bracket_gives_the_local_plan_and_the_exact_lambda(instance, edges, form):
    value, cost, budget = (ratio_form(instance.scores, instance.levels, 3.0) if form == "ratio"
                           else absolute_form(instance.scores, instance.levels, 2500.0))
    exact = solve_budget(value, cost, budget, sample_size=N_ROWS)  # every request hulled
    wide = solve_budget(value, cost, budget, seed=4)
    local = solve_budget(value, cost, budget, seed=4, gather_rows=GATHER)
    assert wide.lagrange_path == "hull+sweep" and local.lagrange_path == "hull+narrow+sweep"
    sample = budget_module._sample_size(N_ROWS, None)
    assert local.hulled_rows - sample <= GATHER < wide.hulled_rows - sample
    assert local.lam == exact.lam and local.upper_bound == pytest.approx(exact.upper_bound, rel=1e-12)
    assert local.spent <= budget and local.gap <= (value.max(axis=1) - value.min(axis=1)).max()
    pickling_map.calls = 0
    partitioned = solve_budget_parts(array_parts(value, cost, edges), budget, map_parts=pickling_map, seed=4,
                                     gather_rows=GATHER)
    assert_same_plan(partitioned, local)
    assert pickling_map.calls == 3 + local.sweeps  # counts, sample, narrowing passes and sweep, choices


def three_groups(seed=0):
    """Requests with one step of efficiency 1, 1/2 or 1/4 (Δvalue 1), and a budget that stops inside the 1/2
    group: λ* = 1/2 exactly, the middle edge of 256 bins over [0, 1], tied by a third of the requests."""
    group = np.random.default_rng(seed).integers(0, 3, N_ROWS)
    value, cost = np.zeros((N_ROWS, 2)), np.zeros((N_ROWS, 2))
    value[:, 1], cost[:, 1] = 1.0, np.array([1.0, 2.0, 4.0])[group]
    return value, cost, float((group == 0).sum() + 2 * ((group == 1).sum() // 2) + 1)


def test_lambda_on_a_bin_edge_and_tied_requests_are_kept_inside(monkeypatch):
    value, cost, budget = three_groups()
    exact = solve_budget(value, cost, budget, sample_size=N_ROWS)
    bracket = budget_module._Hull.bracket
    monkeypatch.setattr(budget_module._Hull, "bracket", lambda hull, share, width: (
        (0.0, 1.0) if width == budget_module.BRACKET_WIDTHS[0] else bracket(hull, share, width)))
    local = solve_budget(value, cost, budget, gather_rows=GATHER)
    # no widening: two passes (the second shows only the tied requests left), one sweep that gathers them
    assert local.sweeps == 3 and local.lam == exact.lam == 0.5
    assert local.objective == exact.objective and local.upper_bound == exact.upper_bound
    assert local.hulled_rows - budget_module._sample_size(N_ROWS, None) == int((cost[:, 1] == 2).sum())
    assert_same_plan(solve_budget_parts(array_parts(value, cost, cuts(7)), budget, gather_rows=GATHER), local)


def test_identical_requests_are_all_gathered():
    value, cost = np.tile([0.0, 1.0, 2.0, 3.0], (N_ROWS, 1)), np.tile([0.0, 1.0, 3.0, 7.0], (N_ROWS, 1))
    budget = N_ROWS + 2 * (N_ROWS // 3) + 0.5  # every request tied at λ* = 1/2: no bracket leaves fewer
    exact = solve_budget(value, cost, budget, sample_size=N_ROWS)
    local = solve_budget(value, cost, budget, gather_rows=GATHER)
    assert local.lagrange_path == "hull+narrow+sweep" and local.lam == exact.lam == 0.5
    assert local.objective == exact.objective and local.spent <= budget
    assert_same_plan(solve_budget_parts(array_parts(value, cost, cuts(5)), budget, gather_rows=GATHER), local)


@pytest.mark.parametrize("case", ["loose", "zero-costs", "infinite-bracket", "missed-bracket"])
def test_degenerate_brackets_give_the_local_plan(instance, monkeypatch, case):
    value, cost, budget = ratio_form(instance.scores, instance.levels, 3.0)
    if case == "loose":  # never binding: λ* = 0, every request at its best value
        value, cost, _ = absolute_form(instance.scores, instance.levels, 0.0)
        budget = float(cost[np.arange(N_ROWS), value.argmax(axis=1)].sum()) + 1.0
    if case == "zero-costs":
        cost = np.zeros_like(cost)
    exact = solve_budget(value, cost, budget, sample_size=N_ROWS)
    bracket = budget_module._Hull.bracket
    first = {"infinite-bracket": (0.0, np.inf), "missed-bracket": (exact.lam * 0.3, exact.lam * 0.33)}.get(case)
    monkeypatch.setattr(budget_module._Hull, "bracket", lambda hull, share, width: (
        first if first and width == budget_module.BRACKET_WIDTHS[0] else bracket(hull, share, width)))
    local = solve_budget(value, cost, budget, seed=3, gather_rows=GATHER)
    assert local.lam == exact.lam and local.upper_bound == pytest.approx(exact.upper_bound, rel=1e-12)
    assert local.lagrange_path == ("hull+sweep" if case == "zero-costs" else "hull+narrow+sweep")
    if case in ("loose", "zero-costs"):
        np.testing.assert_array_equal(local.choice, value.argmax(axis=1))
    assert_same_plan(solve_budget_parts(array_parts(value, cost, cuts(9)), budget, seed=3, gather_rows=GATHER),
                     local)


def test_an_infeasible_budget_is_found_by_the_first_narrowing_pass(instance):
    value, cost, _ = absolute_form(instance.scores, instance.levels, 0.0)
    budget = 0.999 * float(cost.min(axis=1).sum())
    with pytest.raises(DataError) as wide:
        solve_budget(value, cost, budget, sample_size=500)
    steps = []

    def recording_map(fn, items):
        steps.append(fn.__name__)
        return map(fn, items)

    with pytest.raises(DataError) as narrowed:
        solve_budget_parts(array_parts(value, cost, cuts(5)), budget, map_parts=recording_map, sample_size=500,
                           gather_rows=GATHER)
    assert str(narrowed.value) == str(wide.value) and "infeasible" in str(wide.value)
    assert steps == ["_count_part", "_sample_part", "_histogram_part", "_worst_part"]


# ------------------------------------------------------------------------------------------ solver, on files


@pytest.mark.parametrize("form", ["ratio", "absolute"])
def test_file_parts_give_the_local_plan(instance, tmp_path, form):
    edges = cuts(6, seed=5)
    paths = write_parts(instance.scores, instance.levels, edges, tmp_path / "scores")
    value, cost, budget = (ratio_form(instance.scores, instance.levels, 3.0) if form == "ratio"
                           else absolute_form(instance.scores, instance.levels, 2500.0))
    local = solve_budget(value, cost, budget, seed=2)
    parts = [BudgetPart(str(path), ratio=3.0 if form == "ratio" else None) for path in paths]
    assert_same_plan(solve_budget_parts(parts, budget, map_parts=pickling_map, seed=2), local)


def test_a_narrowed_bracket_on_a_ray_cluster_gives_the_local_plan(instance, tmp_path, ray_cluster):
    from promokit.scale.executor import make_executor

    paths = write_parts(instance.scores, instance.levels, cuts(6, seed=5), tmp_path / "scores")
    value, cost, budget = ratio_form(instance.scores, instance.levels, 3.0)
    local = solve_budget(value, cost, budget, seed=2, gather_rows=GATHER)
    parts = [BudgetPart(str(path), ratio=3.0) for path in paths]
    solved = solve_budget_parts(parts, budget, map_parts=make_executor("ray", workers=2).map, seed=2,
                                gather_rows=GATHER)
    assert solved.plan.lagrange_path == "hull+narrow+sweep"
    assert_same_plan(solved, local)


# ---------------------------------------------------------------------------------------------------- CLI

runner = CliRunner()


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def merchants():
    return make_budget_instance(400, seed=12)


@pytest.fixture(scope="module")
def files(instance, merchants, tmp_path_factory):
    """The instance as one file and as parts (one empty), and a merchants file."""
    folder = tmp_path_factory.mktemp("parts")
    whole = score_frame(np.arange(N_ROWS), instance.levels, {"score": instance.scores}, LEVEL)
    whole.to_parquet(folder / "scores.parquet", index=False)
    write_parts(instance.scores, instance.levels, cuts(8, seed=9), folder / "scores")
    score_frame(np.arange(400), merchants.levels, {"score": merchants.scores}, LEVEL).to_parquet(
        folder / "merchants.parquet", index=False)
    return folder


@pytest.mark.parametrize("extra", [[], ["--merchants", "{files}/merchants.parquet", "--merchant-paid-on", "request"]],
                         ids=["customers", "with-merchants"])
@pytest.mark.parametrize("scores", ["{files}/scores", "{files}/scores/part-*.parquet"], ids=["directory", "glob"])
def test_cli_on_parts_equals_cli_on_the_concatenated_file(files, tmp_path, scores, extra):
    extra = [arg.format(files=files) for arg in extra]
    whole = _invoke("allocate", "budget", "--scores", files / "scores.parquet", "--ratio", 3, *extra,
                    "--out", tmp_path / "whole")
    parts = _invoke("allocate", "budget", "--scores", scores.format(files=files), "--ratio", 3, *extra,
                    "--out", tmp_path / "parts")
    assert whole.exit_code == 0 and parts.exit_code == 0, whole.output + parts.output
    assert "with lagrange" in parts.output and "\nlagrange: objective" in parts.output
    one, many = (json.loads((tmp_path / name / "report.json").read_text()) for name in ("whole", "parts"))
    assert many["method"] == one["method"] == "lagrange" and many["lagrange_path"] == one["lagrange_path"]
    assert many["parts"] == 8 + bool(extra) and "parts" not in one
    for field in ("lam", "objective", "upper_bound", "budget_row_used", "expected_responses", "expected_spend"):
        assert many[field] == pytest.approx(one[field], rel=1e-9), field
    assert many["per_level"]["requests"] == one["per_level"]["requests"]
    written = sorted((tmp_path / "parts" / "plan").glob("part-*.parquet"))
    assert [path.name for path in written] == [f"part-{i:05d}.parquet" for i in range(8 + bool(extra))]
    plan = pd.concat([pd.read_parquet(path) for path in written], ignore_index=True)
    pd.testing.assert_frame_equal(plan, pd.read_parquet(tmp_path / "whole" / "plan.parquet"))


@pytest.mark.parametrize("spoil, message", [
    (lambda frame: frame.assign(**{"score_2": frame["score_2"].where(frame.index != 17)}),
     "scores/part-00003.parquet: column 'score_2' has missing, non-numeric, infinite or negative values: 1 of "),
    (lambda frame: frame.rename(columns={"score_10": "score_12"}),
     "scores/part-00003.parquet: levels [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 12.0] differ from"),
])
def test_a_bad_part_names_its_file_and_row(files, tmp_path, spoil, message):
    folder = tmp_path / "scores"
    folder.mkdir()
    for path in sorted((files / "scores").glob("*.parquet")):
        frame = pd.read_parquet(path)
        (spoil(frame) if path.name == "part-00003.parquet" else frame).to_parquet(folder / path.name, index=False)
    result = _invoke("allocate", "budget", "--scores", folder, "--ratio", 3, "--out", tmp_path / "out")
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output
    assert len([line for line in result.output.splitlines() if line.startswith("error:")]) == 1
    if "NaN" in message or "missing" in message:
        assert "e.g. row 17 {" in result.output


@pytest.mark.parametrize("args, message", [
    (["--scores", "{files}/scores", "--ratio", 3, "--method", "lp"], "--method lp needs the whole table in one file"),
    (["--scores", "{files}/none-*.parquet", "--ratio", 3], "none-*.parquet: no file matches this pattern"),
    (["--scores", "{files}/scores", "--total", 1], "--total 1: budget 1 is infeasible"),
])
def test_partitioned_input_errors_are_one_line(files, tmp_path, args, message):
    result = _invoke("allocate", "budget", *[str(a).format(files=files) for a in args], "--out", tmp_path)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output


def test_a_customer_in_two_parts_is_named_with_both_files(files, tmp_path):
    folder = tmp_path / "scores"
    folder.mkdir()
    sources = sorted((files / "scores").glob("*.parquet"))
    for path in sources:
        frame = pd.read_parquet(path)
        if path.name == "part-00005.parquet":  # its first customer is also the second part's first
            frame.loc[frame["user_id"] == frame["user_id"].iloc[0], "user_id"] = pd.read_parquet(sources[1])["user_id"][0]
        frame.to_parquet(folder / path.name, index=False)
    result = _invoke("allocate", "budget", "--scores", folder, "--ratio", 3, "--out", tmp_path / "out")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "is in two parts, " in result.output and "part-00001.parquet (row 0)" in result.output
    assert "part-00005.parquet (row 0): each user_id must be in one part" in result.output
    assert not (tmp_path / "out" / ".user-keys").exists()
