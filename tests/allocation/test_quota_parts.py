"""Quota allocation over a partitioned score table (EOCA eqs. 1–5): ``prices`` with every pass a map over the parts
gives the local ``prices`` plan, meets every constraint, writes one plan part per input part, and names bad parts."""

import json
import pickle
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.allocation.quota import check_plan, solve_quota
from promokit.allocation.quota_parts import QuotaPart, solve_quota_parts
from promokit.allocation.tables import FUND, score_frame
from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.allocation.instances import make_quota_instance

pytestmark = pytest.mark.extra("allocation")

# the sampled path (sample, clearing, gather, repair) on a few thousand users, as in test_allocation_quota
SAMPLED = dict(base_users=200, sample_ratio=4.0)
# one sweep and few candidates: the margin repair runs, widens and needs the whole plan's prices (seed 33)
CUT_SHORT = dict(base_users=100, sample_ratio=4.0, candidate_constant=0.3, max_sweeps=1, min_margin_users=1)
EDGES = [0, 700, 700, 1500, 2600, 3000]  # five parts, the second empty


def pickling_map(fn, items):
    """builtin map through pickle both ways, as a process-based executor would run it, recording the steps."""
    pickling_map.steps.append(fn.__name__)
    return [pickle.loads(pickle.dumps(pickle.loads(pickle.dumps(fn))(pickle.loads(pickle.dumps(item)))))
            for item in items]


def write_parts(instance, edges, folder, risk=True, layout="wide", shuffle_funds=False):
    """The instance's rows ``edges[i]:edges[i + 1]`` as Parquet part i (user ids 1000 + row); with
    ``shuffle_funds`` every other part lists its funds in reverse."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        order = np.arange(len(instance.funds))[::-1] if shuffle_funds and i % 2 else np.arange(len(instance.funds))
        per_user = {"tolerance": instance.tolerance[lo:hi]} if risk else None
        frame = score_frame(1000 + np.arange(lo, hi), [instance.funds[j] for j in order],
                            {"score": instance.etv[lo:hi][:, order]}, FUND, layout, per_user=per_user)
        paths.append(folder / f"part-{i:05d}.parquet")
        frame.to_parquet(paths[-1], index=False)
    return paths


def counts_of(instance, kind):
    if kind == "exact":
        return dict(quotas=instance.quotas)
    lower = (instance.quotas * 0.9).astype(np.int64)
    lower[0] = 0
    upper = np.ceil(instance.quotas * 1.1)
    upper[-1] = np.inf
    return dict(min_users=lower, max_users=upper)


def assert_same_plan(partitioned, local, instance, risk, counts):
    assignment = np.concatenate(partitioned.outputs)
    np.testing.assert_array_equal(assignment, local.assignment)
    plan = partitioned.plan
    assert plan.objective == pytest.approx(local.objective, rel=1e-9)
    assert plan.upper_bound == pytest.approx(local.upper_bound, rel=1e-9)
    assert plan.diagnostics["certified"] and plan.gap <= 1e-6 * abs(plan.upper_bound)
    assert plan.diagnostics["prices"] == pytest.approx(local.diagnostics["prices"], rel=1e-12, abs=1e-9)
    check_plan(assignment, tolerance=instance.tolerance if risk else None, risk=instance.risk if risk else None,
               **counts)
    np.testing.assert_array_equal(partitioned.counts, np.bincount(assignment, minlength=len(instance.funds)))


@pytest.fixture(scope="module")
def instance():
    return make_quota_instance(3000, 5, seed=4)


# ---------------------------------------------------------------------------------------- solver, on files


@pytest.mark.parametrize("kind", ["exact", "bounds"])
@pytest.mark.parametrize("risk", [True, False], ids=["risk", "no-risk"])
def test_parts_give_the_local_prices_plan(instance, tmp_path, risk, kind):
    paths = write_parts(instance, EDGES, tmp_path, risk)
    counts = counts_of(instance, kind)
    rule = dict(tolerance=instance.tolerance, risk=instance.risk) if risk else {}
    local = solve_quota(instance.etv, method="prices", seed=7, **rule, **counts, **SAMPLED)
    pickling_map.steps = []
    partitioned = solve_quota_parts([QuotaPart(str(path)) for path in paths], risk=rule.get("risk"),
                                    map_parts=pickling_map, seed=7, **counts, **SAMPLED)
    assert_same_plan(partitioned, local, instance, risk, counts)
    maps = partitioned.plan.diagnostics["maps"]
    assert maps[:3] == ["count", "sample", "choose"] and maps[-1] == "finish" and "measure" in maps
    assert pickling_map.steps[:2] == ["_count_part", "_sample_part"]
    assert partitioned.plan.assignment is None and partitioned.plan.method == "prices"
    # the levels below the top are the local solver's own sample levels, solved in memory
    levels = partitioned.plan.diagnostics["levels"]
    assert [level["users"] for level in levels] == [level["users"] for level in local.diagnostics["levels"]]


def test_a_repair_that_widens_its_margin_and_certifies_by_the_whole_plan_gives_the_local_plan(tmp_path):
    instance = make_quota_instance(2000, 5, seed=33)
    paths = write_parts(instance, [0, 700, 700, 1500, 2000], tmp_path)
    local = solve_quota(instance.etv, instance.quotas, instance.tolerance, instance.risk, method="prices", **CUT_SHORT)
    assert local.diagnostics["levels"][-1]["margin_attempts"] == 2
    partitioned = solve_quota_parts([QuotaPart(str(path)) for path in paths], instance.quotas, instance.risk,
                                    **CUT_SHORT)
    assert_same_plan(partitioned, local, instance, True, dict(quotas=instance.quotas))
    # two certificates of the first margin (lifted prices, then the whole plan's), a wider margin, its certificate
    assert partitioned.plan.diagnostics["maps"][-5:] == ["measure", "measure", "gather", "measure", "finish"]


def test_small_inputs_are_gathered_and_solved_in_memory(instance, tmp_path):
    paths = write_parts(instance, EDGES, tmp_path)
    local = solve_quota(instance.etv, instance.quotas, instance.tolerance, instance.risk, method="prices")
    parts = [QuotaPart(str(path), rows=hi - lo) for path, lo, hi in zip(paths, EDGES[:-1], EDGES[1:])]
    partitioned = solve_quota_parts(parts, instance.quotas, instance.risk)
    assert_same_plan(partitioned, local, instance, True, dict(quotas=instance.quotas))
    assert partitioned.plan.diagnostics["maps"] == ["sample", "finish"]  # rows given: no count


@pytest.mark.parametrize("kind", ["exact", "bounds"])
def test_a_sample_larger_than_gather_users_is_solved_in_parts_then_removed(tmp_path, kind):
    """60,000 users in six parts, a sample level gathered only at 2,000 rows: the samples of 15,002 and 3,667 users
    are levels in parts (written beside the plan), the one of 874 is gathered; the plan is the local one."""
    instance = make_quota_instance(60_000, 8, seed=5)
    paths = write_parts(instance, [0, 20_000, 20_000, 25_000, 40_000, 52_000, 60_000], tmp_path / "scores")
    parts = [QuotaPart(str(path)) for path in paths]
    counts, options = counts_of(instance, kind), dict(base_users=500, sample_ratio=4.0)
    local = solve_quota(instance.etv, tolerance=instance.tolerance, risk=instance.risk, method="prices", seed=3,
                        **counts, **options)
    scratch, written = tmp_path / "out", set()

    def watching_map(fn, items):
        written.update(path.name for path in scratch.rglob("*.npz"))
        return pickling_map(fn, items)

    pickling_map.steps = []
    partitioned = solve_quota_parts(parts, risk=instance.risk, map_parts=watching_map, seed=3, gather_users=2000,
                                    scratch=scratch, **counts, **options)
    assert_same_plan(partitioned, local, instance, True, counts)
    levels = partitioned.plan.diagnostics["levels"]
    assert [level["users"] for level in levels] == [level["users"] for level in local.diagnostics["levels"]]
    assert [level["users"] for level in levels][-4:-1] == [874, 3667, 15_002]
    assert partitioned.plan.diagnostics["maps"][:4] == ["count", "sample", "sample", "sample"]
    assert written == {f"sample{level}-part-{i:05d}.npz" for level in (0, 1) for i in (0, 2, 3, 4, 5)}
    assert list(scratch.iterdir()) == []  # the temporary folder is gone

    def failing_map(fn, items):
        if fn.__name__ == "_evaluate_part":
            raise RuntimeError("a worker was lost")
        return map(fn, items)

    with pytest.raises(RuntimeError, match="a worker was lost"):
        solve_quota_parts(parts, risk=instance.risk, map_parts=failing_map, seed=3, gather_users=2000,
                          scratch=scratch, **counts, **options)
    assert list(scratch.iterdir()) == []


def test_a_binding_maximum_holds_exactly_with_a_nonnegative_price(tmp_path):
    """Fund F2 would be most users' best fund; at most 100 of them may have it, and it gets exactly 100."""
    instance = make_quota_instance(3000, 4, seed=2)
    etv = instance.etv.copy()
    etv[:, 1] *= 3.0
    instance = replace(instance, etv=etv)
    allowed = instance.tolerance[:, None] >= instance.risk[None, :]
    assert np.bincount(np.where(allowed, etv, -1).argmax(axis=1), minlength=4)[1] > 1000
    counts = dict(min_users=[0, 0, 0, 0], max_users=[np.inf, 100, np.inf, np.inf])
    paths = write_parts(instance, [0, 1000, 1000, 3000], tmp_path)
    local = solve_quota(etv, tolerance=instance.tolerance, risk=instance.risk, method="prices", **counts, **SAMPLED)
    partitioned = solve_quota_parts([QuotaPart(str(path)) for path in paths], risk=instance.risk, **counts, **SAMPLED)
    assert_same_plan(partitioned, local, instance, True, counts)
    assert partitioned.counts[1] == 100 and partitioned.plan.diagnostics["prices"][1] > 0
    exact = solve_quota(etv, tolerance=instance.tolerance, risk=instance.risk, method="exact", **counts)
    assert partitioned.plan.objective == pytest.approx(exact.objective, rel=1e-9)


def test_long_parts_listing_their_funds_in_another_order_are_aligned_to_the_given_funds(instance, tmp_path):
    paths = write_parts(instance, EDGES, tmp_path, layout="long", shuffle_funds=True)
    local = solve_quota(instance.etv, instance.quotas, instance.tolerance, instance.risk, method="prices", **SAMPLED)
    parts = [QuotaPart(str(path), funds=tuple(instance.funds)) for path in paths]
    partitioned = solve_quota_parts(parts, instance.quotas, instance.risk, funds=instance.funds, **SAMPLED)
    assert_same_plan(partitioned, local, instance, True, dict(quotas=instance.quotas))
    with pytest.raises(DataError, match=r"part-00003\.parquet: funds \['F5', 'F4', 'F3', 'F2', 'F1'\] differ from "
                                        r"\['F1', 'F2', 'F3', 'F4', 'F5'\] in .*part-00000\.parquet"):
        solve_quota_parts([QuotaPart(str(path)) for path in paths], instance.quotas, instance.risk)


def test_plan_parts_keep_the_input_row_order_and_keys(instance, tmp_path):
    paths = write_parts(instance, EDGES, tmp_path / "scores")
    parts = [QuotaPart(str(path), out=str(tmp_path / "plan" / path.name)) for path in paths]
    partitioned = solve_quota_parts(parts, instance.quotas, instance.risk, **SAMPLED)
    local = solve_quota(instance.etv, instance.quotas, instance.tolerance, instance.risk, method="prices", **SAMPLED)
    assert partitioned.outputs == [None] * len(paths)
    plans = [pd.read_parquet(tmp_path / "plan" / path.name) for path in paths]
    for plan, path in zip(plans, paths):
        assert plan["user_id"].tolist() == pd.read_parquet(path)["user_id"].tolist()
        assert list(plan.columns) == ["user_id", "fund", "score", "tolerance", "risk"]
    plan = pd.concat(plans, ignore_index=True)
    assert plan["user_id"].tolist() == (1000 + np.arange(3000)).tolist()
    assert plan["fund"].tolist() == [instance.funds[j] for j in local.assignment]
    assert plan["score"].sum() == pytest.approx(local.objective, rel=1e-12)
    assert (plan["tolerance"] >= plan["risk"]).all() and len(plans[1]) == 0


@pytest.mark.parametrize("quotas, message", [
    ("short", r"quotas of types \[4\] \(risk ≥ 5\) cannot be met: they need \d+ users but only \d+ users have "
              r"tolerance ≥ 5; short by \d+ users"),
    ("sum", r"quotas sum to 2999 but etv has 3000 users"),
])
def test_infeasible_quotas_fail_as_in_memory(instance, tmp_path, quotas, message):
    paths = write_parts(instance, EDGES, tmp_path)
    bad = instance.quotas.copy()
    if quotas == "short":
        bad[4] += int((instance.tolerance >= 5).sum())
        bad[0] -= int((instance.tolerance >= 5).sum())
    else:
        bad[0] -= 1
    with pytest.raises(DataError, match=message) as local:
        solve_quota(instance.etv, bad, instance.tolerance, instance.risk)
    with pytest.raises(DataError, match=message) as partitioned:
        solve_quota_parts([QuotaPart(str(path)) for path in paths], bad, instance.risk)
    assert str(partitioned.value) == str(local.value)


def test_parts_without_users_or_without_the_tolerance_column_are_errors(instance, tmp_path):
    paths = write_parts(instance, [0, 0, 0], tmp_path / "empty")
    with pytest.raises(DataError, match="the 2 parts hold no users"):
        solve_quota_parts([QuotaPart(str(path)) for path in paths], [0] * 5)
    paths = write_parts(instance, EDGES, tmp_path / "no-risk", risk=False)
    with pytest.raises(DataError, match=r"part-00000\.parquet: the risk rule \(eq\. 5\) needs a 'tolerance' column"):
        solve_quota_parts([QuotaPart(str(path)) for path in paths], instance.quotas, instance.risk)


# ---------------------------------------------------------------------------------------------------- CLI

runner = CliRunner()


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """60,000 users (above the 50,000 solved in memory: the sampled path at the default options) as one file and
    as six parts (one empty), and their quotas."""
    folder = tmp_path_factory.mktemp("quota-parts")
    instance = make_quota_instance(60_000, 8, seed=5)
    score_frame(1000 + np.arange(60_000), instance.funds, {"score": instance.etv}, FUND,
                per_user={"tolerance": instance.tolerance}).to_parquet(folder / "scores.parquet", index=False)
    write_parts(instance, [0, 20_000, 20_000, 25_000, 40_000, 52_000, 60_000], folder / "scores")
    pd.DataFrame({"fund": instance.funds, "quota": instance.quotas, "risk": instance.risk}).to_csv(
        folder / "quotas.csv", index=False)
    return folder


@pytest.mark.parametrize("scores", ["{files}/scores", "{files}/scores/part-*.parquet"], ids=["directory", "glob"])
def test_cli_on_parts_equals_cli_on_the_concatenated_file(files, tmp_path, scores):
    whole = _invoke("allocate", "quota", "--scores", files / "scores.parquet", "--quotas", files / "quotas.csv",
                    "--out", tmp_path / "whole")
    parts = _invoke("allocate", "quota", "--scores", scores.format(files=files), "--quotas", files / "quotas.csv",
                    "--out", tmp_path / "parts")
    assert whole.exit_code == 0 and parts.exit_code == 0, whole.output + parts.output
    assert "\nprices: objective" in parts.output
    one, many = (json.loads((tmp_path / name / "report.json").read_text()) for name in ("whole", "parts"))
    assert many["parts"] == 6 and "parts" not in one and many["method"] == one["method"] == "prices"
    assert many["objective"] == pytest.approx(one["objective"], rel=1e-9)
    assert many["upper_bound"] == pytest.approx(one["upper_bound"], rel=1e-9)
    assert abs(many["relative_gap"]) <= 1e-6 and many["diagnostics"]["certified"]
    assert many["per_fund"]["assigned"] == one["per_fund"]["assigned"] == many["per_fund"]["quota"]
    assert "choose" in many["diagnostics"]["maps"]  # the sampled path, not the one for small inputs
    assert "| parts | 6 |" in (tmp_path / "parts" / "report.md").read_text()
    written = sorted((tmp_path / "parts" / "plan").glob("part-*.parquet"))
    assert [path.name for path in written] == [f"part-{i:05d}.parquet" for i in range(6)]
    plan = pd.concat([pd.read_parquet(path) for path in written], ignore_index=True)
    pd.testing.assert_frame_equal(plan, pd.read_parquet(tmp_path / "whole" / "plan.parquet"))


def test_a_bad_part_names_its_file_and_row(files, tmp_path):
    folder = tmp_path / "scores"
    folder.mkdir()
    for path in sorted((files / "scores").glob("*.parquet")):
        frame = pd.read_parquet(path)
        if path.name == "part-00003.parquet":
            frame["score_F2"] = frame["score_F2"].where(frame.index != 17)
        frame.to_parquet(folder / path.name, index=False)
    result = _invoke("allocate", "quota", "--scores", folder, "--quotas", files / "quotas.csv", "--out", tmp_path / "o")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert ("scores/part-00003.parquet: column 'score_F2' has missing, non-numeric, infinite or negative values: 1 of "
            "15000 rows in the wide table, e.g. row 17 {" in result.output)
    assert len([line for line in result.output.splitlines() if line.startswith("error:")]) == 1


@pytest.mark.parametrize("args, message", [
    (["--method", "exact"], "--method exact needs the whole table in one file; a directory or glob of parts is "
                            "solved with --method prices"),
    (["--executor", "spark"], "--executor must be one of ['local', 'ray'], got 'spark'"),
])
def test_partitioned_input_errors_are_one_line(files, tmp_path, args, message):
    result = _invoke("allocate", "quota", "--scores", files / "scores", "--quotas", files / "quotas.csv",
                     "--out", tmp_path, *args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output


def test_an_executor_needs_parts(files, tmp_path):
    result = _invoke("allocate", "quota", "--scores", files / "scores.parquet", "--quotas", files / "quotas.csv",
                     "--out", tmp_path, "--executor", "ray")
    assert result.exit_code == 2 and "--executor ray runs a table in parts" in result.output, result.output


def test_ray_quota_allocation_equals_the_local_one(ray_cluster, files, tmp_path):
    """The sampled path with every map on the 2-node cluster: the same report and plan parts as in this process."""
    reports = {}
    for executor in ("local", "ray"):
        result = _invoke("allocate", "quota", "--scores", files / "scores", "--quotas", files / "quotas.csv",
                         "--out", tmp_path / executor, "--executor", executor, "--workers", 2)
        assert result.exit_code == 0, result.output
        reports[executor] = json.loads((tmp_path / executor / "report.json").read_text())
    for field in ("objective", "upper_bound", "gap", "per_fund"):
        assert reports["ray"][field] == reports["local"][field], field
    assert reports["ray"]["diagnostics"]["maps"] == reports["local"]["diagnostics"]["maps"]
    for k in range(6):
        name = f"part-{k:05d}.parquet"
        assert pd.read_parquet(tmp_path / "ray" / "plan" / name).equals(pd.read_parquet(tmp_path / "local" / "plan" / name))


def test_ray_solves_a_sample_in_parts_as_this_process_does(ray_cluster, files, tmp_path):
    """The sample levels' parts are written and read by the cluster's workers, in the folder given (shared)."""
    from promokit.scale.executor import make_executor

    parts = [QuotaPart(str(path)) for path in sorted((files / "scores").glob("*.parquet"))]
    quotas = pd.read_csv(files / "quotas.csv")
    options = dict(base_users=500, sample_ratio=4.0, gather_users=2000, scratch=tmp_path / "out")
    solved = {name: solve_quota_parts(parts, quotas["quota"], quotas["risk"], map_parts=map_parts, **options)
              for name, map_parts in (("local", map), ("ray", make_executor("ray", workers=2).map))}
    assert solved["ray"].plan.diagnostics["maps"] == solved["local"].plan.diagnostics["maps"]
    assert solved["ray"].plan.diagnostics["maps"][:4] == ["count", "sample", "sample", "sample"]
    np.testing.assert_array_equal(np.concatenate(solved["ray"].outputs), np.concatenate(solved["local"].outputs))
    assert list((tmp_path / "out").iterdir()) == []


def test_a_user_in_two_parts_is_named_with_both_files(files, tmp_path):
    folder = tmp_path / "scores"
    folder.mkdir()
    sources = sorted((files / "scores").glob("*.parquet"))
    for path in sources:
        frame = pd.read_parquet(path)
        if path.name == "part-00004.parquet":
            frame.loc[3, "user_id"] = pd.read_parquet(sources[2])["user_id"][7]
        frame.to_parquet(folder / path.name, index=False)
    result = _invoke("allocate", "quota", "--scores", folder, "--quotas", files / "quotas.csv", "--out", tmp_path / "o")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "part-00002.parquet (row 7) and " in result.output and "part-00004.parquet (row 3)" in result.output
