"""One rule for URIs in every entry point that writes (issue 41): given an ``s3://`` value, each writing argument of
the library and each output option of the command line either writes there through pyarrow's file systems (the
S3 emulator of conftest's ``bucket``: the objects appear) or is refused in one line naming the argument, before
any work — nothing read, nothing in the bucket, no local folder named after the scheme (``./s3:``). URIs print
whole in every message, never ``s3:/bucket`` with a lost slash.

The command-line sweep walks the click tree: an output option without an entry in :data:`CLI` fails
:func:`test_every_output_option_of_the_command_line_is_swept`; so does, for the library, a writing argument of
``import promokit as pk``'s exports without an entry in :data:`LIBRARY`."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import promokit as pk
from promokit.data.errors import DataError
from promokit.scale.executor import LocalExecutor

pytest.importorskip("moto.server")

#: The rest of the one line a local-only output answers a URI with: "`argument` is URI: " comes first.
LOCAL_ONLY = "this writes to a local folder only (copy it to object storage afterwards)"
#: What a ledger URL that is not a database says ("--ledger" on the command line).
LEDGER = "must be sqlite:///FILE or postgresql://USER@HOST/DB, got '{uri}'"


@dataclass(frozen=True)
class Case:
    """How one writing argument takes ``uri`` (``s3://<bucket>/out``). Honoured: the objects ``writes`` (names under
    ``uri``) appear in the bucket. Refused (``writes`` empty): the one line ``message`` (``{argument}`` and ``{uri}``
    filled in; default: the argument is a local folder only), before any work. ``run``: for the command line the
    arguments (``{uri}``, and ``{name.attr}`` for the module's :class:`Inputs`), for the library a function of the
    URI and the inputs; a refused case's other inputs do not exist, so that its refusal must come before anything
    is read. ``extra``: the promokit extra it needs (skipped without it). ``xfail``: why the rule does not hold
    yet (a strict xfail, so that a fix is noticed)."""

    run: object
    writes: tuple[str, ...] = ()
    message: str = "`{argument}` is {uri}: " + LOCAL_ONLY
    extra: str | None = None
    xfail: str | None = None


def honoured(run, *writes: str, extra: str | None = None) -> Case:
    return Case(run, writes, extra=extra)


def refused(run, message: str | None = None, *, extra: str | None = None, xfail: str | None = None) -> Case:
    return Case(run, (), message or Case.message, extra=extra, xfail=xfail)


# ----------------------------------------------------------------------------------------------------- inputs


class Inputs:
    """Small inputs for the honoured cases and for those refused only after an input is read (a ledger URL is
    checked once the campaign is loaded), made on first use and kept for the module."""

    def __init__(self, root: Path):
        self.root = root

    @cached_property
    def quiet(self):
        from promokit.training import TrainConfig

        return TrainConfig(progress=False)

    @cached_property
    def conversion(self) -> SimpleNamespace:
        from conftest import make_impressions

        folder = self.root / "conversion"
        folder.mkdir()
        make_impressions().iloc[:600].to_parquet(folder / "impressions.parquet", index=False)
        pk.ConversionModel("lr", train=self.quiet).fit(folder / "impressions.parquet").save(folder / "model")
        return SimpleNamespace(model=folder / "model", data=folder / "impressions.parquet")

    @cached_property
    def voucher(self) -> SimpleNamespace:
        from promokit.experiments.voucher.world import make_world, write_world

        world = make_world(n_users=60, n_vouchers=8, n_items=100, n_sessions=300, seed=5)
        files = write_world(world, self.root / "voucher")
        pk.VoucherModel("lr", train=self.quiet).fit(world.tables).save(self.root / "voucher" / "model")
        return SimpleNamespace(model=self.root / "voucher" / "model", **files)

    @cached_property
    def incentive(self) -> SimpleNamespace:
        from promokit.experiments.incentive.world import make_world, write_world

        world = make_world(200, 20, seed=6)
        files = write_world(world, self.root / "incentive")
        tables = pk.incentive.check_tables(world.customers, world.merchants, world.edges)
        pk.IncentiveModel("lr", train=self.quiet).fit(tables).save(self.root / "incentive" / "model")
        return SimpleNamespace(model=self.root / "incentive" / "model", **files)

    @cached_property
    def value(self) -> SimpleNamespace:
        from promokit.experiments.value.world import make_world, write_world

        world = make_world(200, seed=4)
        write_world(world, self.root / "value" / "data")
        tables = pk.value.check_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)
        pk.ValueModel("hurdle", {"n_trees": 20}, train=self.quiet).fit(tables).save(self.root / "value" / "model")
        return SimpleNamespace(model=self.root / "value" / "model", data=self.root / "value" / "data",
                               tables={"users": world.users, "funds": world.funds})

    @cached_property
    def campaign(self) -> Path:
        """A campaign directory with a few decisions and outcomes in its ledger (``campaign export`` has a log)."""
        from test_campaign_export import make_campaign, serve_a_few

        campaign = make_campaign(self.root / "serve")
        serve_a_few(campaign)
        return campaign.path

    @cached_property
    def kuairand(self) -> Path:
        from test_kuairand import write_folder

        return write_folder(self.root / "kuairand")

    @cached_property
    def amexpert(self) -> Path:
        from test_voucher_data import fake_amexpert

        (self.root / "amexpert").mkdir()
        fake_amexpert(self.root / "amexpert")
        return self.root / "amexpert"

    @cached_property
    def transactions(self) -> Path:
        """A purchase log of 40 customers over 2024."""
        rng = np.random.default_rng(0)
        rows = [(f"c{i}", pd.Timestamp("2024-01-01") + pd.Timedelta(days=float(day)), round(float(rng.gamma(2, 15)), 2))
                for i in range(40) for day in np.sort(rng.uniform(0, 365, rng.poisson(4) + 1))]
        pd.DataFrame(rows, columns=["cust", "when", "spend"]).to_csv(self.root / "log.csv", index=False)
        return self.root / "log.csv"

    @cached_property
    def allocation(self):
        """An allocation (``plan_budget`` without ``out``) to write."""
        from promokit.allocation.tables import LEVEL, score_frame

        scores = np.sort(np.random.default_rng(3).random((30, 3)) * 0.3, axis=1)
        return pk.plan_budget(score_frame(np.arange(30), [1.0, 2.0, 4.0], {"score": scores}, LEVEL), ratio=2)

    @cached_property
    def policy_evaluation(self):
        log = pd.DataFrame({"user_id": [f"u{i}" for i in range(30)], "fund": ["F1", "F2"] * 15,
                            "convert": [1, 0, 0] * 10, "amount": [5.0, 0.0, 0.0] * 10})
        return pk.policy.evaluate(log, {"f1": pd.DataFrame({"user_id": log.user_id, "fund": "F1"})}, design="uniform",
                                  bootstrap=20)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Inputs:
    return Inputs(tmp_path_factory.mktemp("uri_sweep"))


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """The test's folder as the working directory: a URI taken for a local path would be written here, ``./s3:``."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def objects(bucket: str) -> set[str]:
    """The keys of the objects in ``bucket``."""
    import pyarrow.fs as pafs

    from promokit.data.uris import as_path, filesystem

    fs, inner = filesystem(as_path(bucket))
    infos = fs.get_file_info(pafs.FileSelector(inner, recursive=True))
    return {info.path[len(inner) + 1:] for info in infos if info.type == pafs.FileType.File}


def check_text(text: str, bucket: str, here: Path) -> None:
    """No slash lost from a URI in ``text`` and no local folder named after the scheme."""
    assert f"s3:/{bucket[len('s3://'):]}" not in text, text
    assert not (here / "s3:").exists()


# ------------------------------------------------------------------------------------------------ command line

#: Every output option of the command line (found by :func:`output_options`), and a few options naming an input
#: the command writes into (``recalibrate --model``, ``campaign switch --campaign``). A refused option's command
#: is given inputs that do not exist (``nowhere``): its one line must come before anything is read.
CLI = {
    ("conversion", "train", "--out"): refused("conversion train --data nowhere.parquet --out {uri}"),
    ("conversion", "tune", "--out"): refused("conversion tune --data nowhere.parquet --out {uri}"),
    ("conversion", "tune", "--storage"): refused("conversion tune --data nowhere.parquet --out tuned --storage {uri}"),
    ("conversion", "predict", "--out"): honoured("conversion predict --model {conversion.model} --data "
                                                 "{conversion.data} --out {uri}", "predictions.parquet",
                                                 "summary.json"),
    ("conversion", "evaluate", "--out"): refused("conversion evaluate --model nowhere --data nowhere.parquet "
                                                 "--out {uri}"),
    ("conversion", "recalibrate", "--model"): refused("conversion recalibrate --model {uri} --data nowhere.parquet"),
    ("conversion", "demo", "--out"): refused("conversion demo --out {uri}"),
    ("conversion", "bench", "--out"): refused("conversion bench --data nowhere.parquet --out {uri}"),
    ("conversion", "synth", "--out"): honoured("conversion synth --out {uri}/world.parquet --impressions 200 "
                                               "--users 20 --items 20 --micro-behaviors 2", "world.parquet",
                                               "world.spec.yaml"),
    ("conversion", "kuairand", "--out"): honoured("conversion kuairand --src {kuairand} --out {uri}/kuai.parquet "
                                                  "--no-ids", "kuai.parquet", "kuai.spec.yaml", "kuai.json"),
    ("conversion", "compare", "--out"): refused("conversion compare --data nowhere.parquet --out {uri}"),
    ("allocate", "budget", "--out"): refused("allocate budget --scores nowhere.parquet --ratio 2 --out {uri}"),
    ("allocate", "quota", "--out"): refused("allocate quota --scores nowhere.parquet --quotas nowhere.csv "
                                            "--out {uri}"),
    ("allocate", "synth", "budget", "--out"): honoured("allocate synth budget --out {uri} --users 50 --merchants 5",
                                                       "scores.parquet", "merchants.parquet"),
    ("allocate", "synth", "quota", "--out"): honoured("allocate synth quota --out {uri} --users 50", "scores.parquet",
                                                      "quotas.csv"),
    ("voucher", "train", "--out"): refused("voucher train --sessions nowhere.parquet --items nowhere.parquet "
                                           "--out {uri}"),
    ("voucher", "tune", "--out"): refused("voucher tune --sessions nowhere.parquet --items nowhere.parquet "
                                          "--out {uri}"),
    ("voucher", "tune", "--storage"): refused("voucher tune --sessions nowhere.parquet --items nowhere.parquet "
                                              "--out tuned --storage {uri}"),
    ("voucher", "predict", "--out"): honoured("voucher predict --model {voucher.model} --sessions {voucher.sessions} "
                                              "--items {voucher.items} --events {voucher.events} --out {uri}",
                                              "predictions.parquet", "summary.json"),
    ("voucher", "evaluate", "--out"): refused("voucher evaluate --model nowhere --sessions nowhere.parquet "
                                              "--items nowhere.parquet --out {uri}"),
    ("voucher", "recalibrate", "--model"): refused("voucher recalibrate --model {uri} --sessions nowhere.parquet "
                                                   "--items nowhere.parquet"),
    ("voucher", "demo", "--out"): refused("voucher demo --out {uri}"),
    ("voucher", "synth", "--out"): honoured("voucher synth --out {uri} --users 20 --sessions 100 --vouchers 5 "
                                            "--items 100", "sessions.parquet", "items.parquet", "events.parquet"),
    ("voucher", "amexpert", "--out"): honoured("voucher amexpert --src {amexpert} --out {uri}", "sessions.parquet",
                                               "items.parquet", "voucher_items.parquet", "amexpert.json"),
    ("voucher", "bench", "--out"): refused("voucher bench --data-dir nowhere --out {uri}"),
    ("voucher", "compare", "--out"): refused("voucher compare --sessions nowhere.parquet --items nowhere.parquet "
                                             "--out {uri}"),
    ("incentive", "synth", "--out"): honoured("incentive synth --out {uri} --customers 50 --merchants 5",
                                              "customers.parquet", "merchants.parquet", "edges.parquet",
                                              "truth_customers.parquet", "world.json"),
    ("incentive", "train", "--out"): refused("incentive train --customers nowhere.parquet --out {uri}"),
    ("incentive", "predict", "--out"): honoured("incentive predict --model {incentive.model} --customers "
                                                "{incentive.customers} --merchants {incentive.merchants} --edges "
                                                "{incentive.edges} --out {uri}", "customers.parquet",
                                                "merchants.parquet", "summary.json"),
    ("incentive", "evaluate", "--out"): refused("incentive evaluate --model nowhere --customers nowhere.parquet "
                                                "--out {uri}"),
    ("incentive", "recalibrate", "--model"): refused("incentive recalibrate --model {uri} --customers "
                                                     "nowhere.parquet"),
    ("incentive", "bench", "--out"): refused("incentive bench --out {uri}"),
    ("incentive", "simulate", "--out"): refused("incentive simulate --world nowhere --model nowhere --out {uri}"),
    ("incentive", "demo", "--out"): refused("incentive demo --out {uri}"),
    ("incentive", "compare", "--out"): refused("incentive compare --customers nowhere.parquet --out {uri}"),
    ("value", "synth", "--out"): honoured("value synth --out {uri} --users 50", "deliveries.parquet", "users.parquet",
                                          "funds.parquet", "truth_etv.parquet", "world.json", "quotas.csv"),
    ("value", "from-transactions", "--out"): honoured(
        "value from-transactions --transactions {transactions} --out {uri} --customer cust --time when --amount "
        "spend --feature-window 2024-01-01,2024-09-01 --target-window 122D", "deliveries.parquet", "users.parquet",
        "funds.parquet", "behaviors.parquet"),
    ("value", "train", "--out"): refused("value train --data nowhere --out {uri}"),
    ("value", "predict", "--out"): honoured("value predict --model {value.model} --data {value.data} --out {uri}",
                                            "scores.parquet", "deliveries.parquet", "summary.json"),
    ("value", "evaluate", "--out"): refused("value evaluate --model nowhere --data nowhere --out {uri}"),
    ("value", "recalibrate", "--model"): refused("value recalibrate --model {uri} --data nowhere"),
    ("value", "bench", "--out"): refused("value bench --out {uri}"),
    ("value", "simulate", "--out"): refused("value simulate --world nowhere --model nowhere --out {uri}"),
    ("value", "demo", "--out"): refused("value demo --out {uri}"),
    ("value", "compare", "--out"): refused("value compare --data nowhere --out {uri}"),
    ("policy", "evaluate", "--out"): refused("policy evaluate --log nowhere.parquet --plan nowhere --out {uri}"),
    ("policy", "uplift", "--out"): refused("policy uplift --log nowhere.parquet --scores nowhere.parquet "
                                           "--out {uri}"),
    ("campaign", "build", "--out"): refused("campaign build --out {uri} --scores nowhere.parquet --budget-plan "
                                            "nowhere --cap 10", extra="serve"),
    ("campaign", "switch", "--campaign"): refused("campaign switch --campaign {uri}", extra="serve"),
    ("campaign", "export", "--out"): honoured("campaign export --campaign {campaign} --out {uri}/log.parquet",
                                              "log.parquet", extra="serve"),
    ("campaign", "export", "--ledger"): refused("campaign export --campaign {campaign} --out log.parquet "
                                                "--ledger {uri}", "{argument} " + LEDGER, extra="serve"),
    ("campaign", "demo", "--out"): refused("campaign demo --out {uri}", extra="serve"),
    ("serve", "--ledger"): refused("serve --campaign {campaign} --ledger {uri}", "{argument} " + LEDGER,
                                   extra="serve"),
}

#: An option's name or help that says it names an output.
OUTPUT_NAME = re.compile(r"^--(out|output|storage|ledger|checkpoint|scratch|records?|report|save|dest)\b")
OUTPUT_HELP = re.compile(r"^(Folder|Parquet file|SQLite file|File|Directory) for\b|\bto write\b", re.IGNORECASE)


def command_options() -> dict[tuple[str, ...], object]:
    """Every option of every ``promokit`` command, keyed by the command's words and the option's first name."""
    import typer

    from promokit.cli import app

    found = {}

    def walk(command, words: tuple[str, ...]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, (*words, name))
            return
        for param in command.params:
            if param.opts and param.opts[0].startswith("--"):
                found[(*words, param.opts[0])] = param

    walk(typer.main.get_command(app), ())
    return found


def output_options() -> set[tuple[str, ...]]:
    return {key for key, param in command_options().items()
            if OUTPUT_NAME.match(key[-1]) or OUTPUT_HELP.search(getattr(param, "help", None) or "")}


def test_every_output_option_of_the_command_line_is_swept():
    options, outputs = set(command_options()), output_options()
    assert ("conversion", "train", "--out") in outputs and ("conversion", "tune", "--storage") in outputs
    assert not outputs - set(CLI), f"output options without a sweep entry in CLI: {sorted(outputs - set(CLI))}"
    assert not set(CLI) - options, f"CLI entries that are no option: {sorted(set(CLI) - options)}"


def marks(case: Case) -> list:
    found = [pytest.mark.extra(case.extra)] if case.extra else []
    return found + ([pytest.mark.xfail(reason=case.xfail, strict=True, raises=AssertionError)] if case.xfail else [])


@pytest.mark.parametrize("key", [pytest.param(key, id=" ".join(key), marks=marks(case)) for key, case in CLI.items()])
def test_a_command_line_output_given_a_uri(key, bucket, here, inputs, monkeypatch):
    from typer.testing import CliRunner

    from promokit.cli import app

    case, uri = CLI[key], f"{bucket}/out"
    monkeypatch.setenv("PROMOKIT_API_TOKEN", "s3cret")  # serve checks it first
    args = [word.format_map(_Fill(inputs, uri)) for word in case.run.split()]
    result = CliRunner().invoke(app, args)
    text = result.output
    check_text(text, bucket, here)
    assert "Traceback" not in text and (result.exception is None or isinstance(result.exception, SystemExit)), text
    if case.writes:
        assert result.exit_code == 0, text
        assert uri in " ".join(text.split()), text  # said whole, where rich may have wrapped the line
        written = objects(bucket)
        assert {f"out/{name}" for name in case.writes} <= written, sorted(written)
    else:
        lines = text.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1, text
        assert lines[0].startswith("error: " + case.message.format(argument=key[-1], uri=uri)), text
        assert not objects(bucket)


class _Fill(dict):
    """``str.format_map``'s mapping: ``{uri}``, and the module's inputs by name (made when first asked for)."""

    def __init__(self, inputs: Inputs, uri: str):
        super().__init__(uri=uri)
        self.inputs = inputs

    def __missing__(self, name: str):
        return getattr(self.inputs, name)


# ----------------------------------------------------------------------------------------------------- library


def _train_parts_value(uri, inputs, argument):
    from promokit.value.parts import train_parts

    where = {"scratch": uri, "checkpoint_dir": None} if argument == "scratch" else {"scratch": "scratch",
                                                                                 "checkpoint_dir": uri}
    return train_parts(pk.ValueModel("esdpm"), {"users": Path("nowhere")}, LocalExecutor(), where["scratch"],
                       checkpoint_dir=where["checkpoint_dir"])


def _train_parts_voucher(uri, inputs, argument):
    from promokit.voucher.train_parts import train_parts

    where = {"scratch": uri, "checkpoint_dir": None} if argument == "scratch" else {"scratch": "scratch",
                                                                                 "checkpoint_dir": uri}
    return train_parts(pk.VoucherModel("dmbgn"), Path("nowhere"), None, Path("nowhere.parquet"), None,
                       LocalExecutor(), where["scratch"], options={}, checkpoint_dir=where["checkpoint_dir"])


def _tune(uri, inputs):
    from promokit.experiments.tuning import space_for

    return pk.experiments.tune(pk.ConversionModel("lr"), space_for("lr"), "nowhere.parquet", metric="ctcvr_auc",
                               storage=uri)


def _ray_train(uri, inputs):
    from promokit.scale.executor import RayExecutor

    return RayExecutor.__new__(RayExecutor).train(None, checkpoint_dir=uri)  # no cluster: refused before one is asked


def _write_data(uri, inputs):
    from promokit.data import write_json, write_parquet, write_table, write_text

    frame = pd.DataFrame({"a": [1, 2]})
    write_table(frame, f"{uri}/table.csv"), write_parquet(frame, f"{uri}/table.parquet")
    write_json({"a": 1}, f"{uri}/a.json"), write_text("a", f"{uri}/a.txt")


#: Every writing argument of the library (found by :func:`library_writing_arguments`), by the function's or method's
#: module and name less ``promokit.``, and the workflows and trainers over parts the commands run.
LIBRARY = {
    ("allocation.budget_plan.plan_budget", "out"): refused(lambda uri, i: pk.plan_budget("nowhere.parquet", ratio=2,
                                                                                          out=uri)),
    ("allocation.quota_plan.plan_quota", "out"): refused(lambda uri, i: pk.plan_quota("nowhere.parquet", "nowhere.csv",
                                                                                       out=uri)),
    ("allocation.result.Allocation.write", "out_dir"): refused(lambda uri, i: i.allocation.write(uri)),
    ("conversion.estimator.ConversionModel.fit", "checkpoint_dir"): refused(
        lambda uri, i: pk.ConversionModel("esm2").fit("nowhere.parquet", checkpoint_dir=uri)),
    ("conversion.estimator.ConversionModel.save", "path"): refused(
        lambda uri, i: pk.ConversionModel.load(i.conversion.model).save(uri)),
    ("voucher.estimator.VoucherModel.fit", "checkpoint_dir"): refused(
        lambda uri, i: pk.VoucherModel("dnn").fit("nowhere", checkpoint_dir=uri)),
    ("voucher.estimator.VoucherModel.save", "path"): refused(
        lambda uri, i: pk.VoucherModel.load(i.voucher.model).save(uri)),
    ("incentive.estimator.IncentiveModel.fit", "checkpoint_dir"): refused(
        lambda uri, i: pk.IncentiveModel("gnn-hazard").fit("nowhere", checkpoint_dir=uri)),
    ("incentive.estimator.IncentiveModel.save", "path"): refused(
        lambda uri, i: pk.IncentiveModel.load(i.incentive.model).save(uri)),
    ("value.estimator.ValueModel.fit", "checkpoint_dir"): refused(
        lambda uri, i: pk.ValueModel("esdpm").fit("nowhere", checkpoint_dir=uri)),
    ("value.estimator.ValueModel.save", "path"): refused(lambda uri, i: pk.ValueModel.load(i.value.model).save(uri)),
    ("training.estimator.Evaluation.write", "out_dir"): refused(
        lambda uri, i: pk.Evaluation("metrics", {"auc": 0.5}).write(uri)),
    ("policy.report.PolicyEvaluation.write", "out_dir"): refused(lambda uri, i: i.policy_evaluation.write(uri)),
    ("experiments.compare.compare", "out"): refused(
        lambda uri, i: pk.compare("nowhere.parquet", ["lr"], domain="conversion", out=uri)),
    ("experiments.compare.Comparison.write", "out"): refused(
        lambda uri, i: pk.experiments.Comparison("conversion", "lr", ("ctcvr_auc",), pd.DataFrame(), "").write(uri)),
    ("experiments.finished_rows.FinishedRows.__init__", "out"): refused(
        lambda uri, i: pk.experiments.FinishedRows(uri, "rows")),
    ("experiments.tuning.tune", "storage"): refused(_tune, extra="tune"),
    ("experiments.conversion.tune.tune_conversion", "storage"): refused(
        lambda uri, i: pk.experiments.conversion.tune_conversion("lr", pd.DataFrame(), storage=uri)),
    ("experiments.voucher.tune.tune_voucher", "storage"): refused(
        lambda uri, i: pk.experiments.voucher.tune_voucher("lr", None, None, None, storage=uri), extra="tune"),
    ("experiments.campaign.demo.run_demo", "out"): refused(lambda uri, i: pk.experiments.campaign.run_demo(uri),
                                                           extra="serve"),
    ("experiments.incentive.world.write_world", "out_dir"): honoured(
        lambda uri, i: pk.experiments.incentive.write_world(pk.experiments.incentive.make_world(50, 5, seed=1), uri),
        "customers.parquet", "merchants.parquet", "edges.parquet", "truth_customers.parquet", "world.json"),
    ("experiments.value.world.write_world", "out_dir"): honoured(
        lambda uri, i: pk.experiments.value.write_world(pk.experiments.value.make_world(50, seed=1), uri),
        "deliveries.parquet", "users.parquet", "truth_etv.parquet", "world.json"),
    ("data.io.write_table", "path"): honoured(_write_data, "table.csv"),
    ("data.io.write_parquet", "path"): honoured(_write_data, "table.parquet"),
    ("data.io.write_json", "path"): honoured(_write_data, "a.json"),
    ("data.io.write_text", "path"): honoured(_write_data, "a.txt"),
    ("conversion.kuairand.write_kuairand", "out"): honoured(
        lambda uri, i: pk.datasets.write_kuairand(i.kuairand, f"{uri}/kuai.parquet"), "kuai.parquet",
        "kuai.spec.yaml", "kuai.json"),
    ("voucher.amexpert.convert_amexpert", "folder"): honoured(
        lambda uri, i: pk.datasets.convert_amexpert(i.amexpert, uri), "sessions.parquet", "items.parquet",
        "amexpert.json"),
    ("value.transactions.write_value_tables", "folder"): honoured(
        lambda uri, i: pk.value.write_value_tables(i.value.tables, uri), "users.parquet", "funds.parquet"),
    ("incentive.parts_training.train_parts", "scratch"): refused(
        lambda uri, i: pk.incentive.train_parts(pk.IncentiveModel("gnn-hazard"), "c", "m", "e", uri, LocalExecutor())),
    ("incentive.parts_training.train_parts", "checkpoint_dir"): refused(
        lambda uri, i: pk.incentive.train_parts(pk.IncentiveModel("gnn-hazard"), "c", "m", "e", "scratch",
                                                LocalExecutor(), checkpoint_dir=uri)),
    ("incentive.parts_training.write_training_records", "out"): refused(
        lambda uri, i: pk.incentive.write_training_records(pk.IncentiveModel("gnn-hazard"), "c", "m", "e", uri,
                                                           LocalExecutor())),
    ("incentive.records.write_records", "out"): refused(
        lambda uri, i: pk.incentive.write_records("c", "m", "e", uri, None, None, LocalExecutor())),
    ("incentive.record_training.fit_from_records", "checkpoint_dir"): refused(
        lambda uri, i: pk.incentive.fit_from_records(pk.IncentiveModel("gnn-hazard"), "records", checkpoint_dir=uri,
                                                     executor=LocalExecutor())),
    ("value.parts.train_parts", "scratch"): refused(lambda uri, i: _train_parts_value(uri, i, "scratch")),
    ("value.parts.train_parts", "checkpoint_dir"): refused(lambda uri, i: _train_parts_value(uri, i, "checkpoint")),
    ("voucher.train_parts.train_parts", "scratch"): refused(lambda uri, i: _train_parts_voucher(uri, i, "scratch")),
    ("voucher.train_parts.train_parts", "checkpoint_dir"): refused(
        lambda uri, i: _train_parts_voucher(uri, i, "checkpoint")),
    ("scale.executor.LocalExecutor.train", "checkpoint_dir"): refused(
        lambda uri, i: LocalExecutor().train(None, checkpoint_dir=uri)),
    ("scale.executor.RayExecutor.train", "checkpoint_dir"): refused(_ray_train, extra="scale"),
    ("scale.process_group.ProcessGroupExecutor.train", "checkpoint_dir"): refused(
        lambda uri, i: pk.scale.ProcessGroupExecutor().train(None, checkpoint_dir=uri)),
    ("training.trainer.Trainer.__init__", "checkpoint_dir"): refused(
        lambda uri, i: pk.training.Trainer(checkpoint_dir=uri)),
    ("training.artifact.ModelDirWriter.__init__", "path"): refused(lambda uri, i: pk.training.ModelDirWriter(uri)),
    ("training.artifact.write_model_dir", "path"): refused(
        lambda uri, i: pk.training.write_model_dir(uri, {}, {}, None)),
    ("campaign.directory.build", "out"): refused(lambda uri, i: pk.campaign.build(uri, "nowhere.parquet", "nowhere", 10),
                                             extra="serve"),
    ("campaign.directory.activate_version", "root"): refused(lambda uri, i: pk.campaign.activate_version(uri),
                                                         extra="serve"),
    ("serve.app.create_app", "ledger_url"): refused(
        lambda uri, i: pk.serve.create_app(i.campaign, ledger_url=uri, token="s3cret"), "`{argument}` " + LEDGER,
        extra="serve"),
    ("serve.export.export_log", "ledger_url"): refused(lambda uri, i: pk.serve.export_log(i.campaign, uri),
                                                       "`{argument}` " + LEDGER, extra="serve"),
}


def _predict(domain: str):
    def run(uri, inputs):
        import importlib

        predict = importlib.import_module(f"promokit.{domain}.workflows").predict
        given = getattr(inputs, domain)
        if domain == "conversion":
            return predict(given.model, given.data, uri, LocalExecutor())
        if domain == "voucher":
            return predict(given.model, given.sessions, given.items, uri, events=given.events)
        if domain == "incentive":
            return predict(given.model, given.customers, given.merchants, given.edges, uri)
        return predict(given.model, given.data, uri, LocalExecutor())
    return run


def _recalibrate(domain: str):
    def run(uri, inputs):
        import importlib

        recalibrate = importlib.import_module(f"promokit.{domain}.workflows").recalibrate
        return recalibrate(uri, *(("nowhere", "nowhere.parquet") if domain == "voucher" else ("nowhere",)))
    return run


# the workflows behind the commands (docs/conventions.md): predictions at a URI, a recalibration into a local model
for _domain, _writes in (("conversion", ("predictions.parquet", "summary.json")),
                         ("voucher", ("predictions.parquet", "summary.json")),
                         ("incentive", ("customers.parquet", "merchants.parquet", "summary.json")),
                         ("value", ("scores.parquet", "deliveries.parquet", "summary.json"))):
    LIBRARY[(f"{_domain}.workflows.predict", "out")] = honoured(_predict(_domain), *_writes)
    LIBRARY[(f"{_domain}.workflows.recalibrate", "model")] = refused(_recalibrate(_domain))

#: Writing-looking arguments that are not: the base class's abstract ``save`` (each model's is swept), and a loaded
#: campaign's folder (a field, nothing written).
NOT_SWEPT = {("training.estimator.Estimator.save", "path"), ("campaign.directory.Campaign.__init__", "folder")}

#: scikit-learn's metadata-routing methods (``set_fit_request(checkpoint_dir=True)``).
SKLEARN_ROUTING = re.compile(r"^set_\w+_request$")
#: Argument names that name an output; ``path`` does in a function or method that saves or writes.
OUTPUT_ARGUMENTS = {"out", "out_dir", "checkpoint_dir", "scratch", "storage", "folder", "ledger_url", "root"}


def library_writing_arguments() -> set[tuple[str, str]]:
    """The (function or method, argument) pairs of ``pk``'s exports whose argument names an output."""
    found, seen = set(), set()

    def check(where: str, function, name: str) -> None:
        try:
            parameters = inspect.signature(function).parameters
        except (TypeError, ValueError):
            return
        for argument in parameters:
            if argument in OUTPUT_ARGUMENTS or argument == "path" and (
                    name.startswith(("save", "write")) or where.endswith("Writer.__init__")):
                found.add((where, argument))

    def visit(module) -> None:
        for name in getattr(module, "__all__", ()):
            try:
                thing = getattr(module, name)
            except pk.MissingExtra:
                continue
            if inspect.ismodule(thing):
                if thing.__name__ not in seen:
                    seen.add(thing.__name__)
                    visit(thing)
            elif inspect.isclass(thing):
                if thing in seen:
                    continue
                seen.add(thing)
                for method in dir(thing):
                    function = getattr(thing, method, None)
                    if SKLEARN_ROUTING.match(method):  # a routing flag per argument of fit, never a path
                        continue
                    if (method == "__init__" or not method.startswith("_")) and inspect.isroutine(function):
                        check(f"{thing.__module__.removeprefix('promokit.')}.{thing.__name__}.{method}", function,
                              method)
            elif callable(thing) and hasattr(thing, "__qualname__"):
                check(f"{thing.__module__.removeprefix('promokit.')}.{thing.__qualname__}", thing, name)

    visit(pk)
    return found


def test_every_writing_argument_of_the_library_is_swept():
    found = library_writing_arguments()
    assert ("conversion.estimator.ConversionModel.save", "path") in found
    missing = found - set(LIBRARY) - NOT_SWEPT
    assert not missing, f"writing arguments without a sweep entry in LIBRARY: {sorted(missing)}"


@pytest.mark.parametrize("key", [pytest.param(key, id=":".join(key), marks=marks(case))
                                 for key, case in LIBRARY.items()])
def test_a_library_writing_argument_given_a_uri(key, bucket, here, inputs):
    case, uri = LIBRARY[key], f"{bucket}/out"
    if case.writes:
        case.run(uri, inputs)
        written = objects(bucket)
        assert {f"out/{name}" for name in case.writes} <= written, sorted(written)
        check_text("", bucket, here)
        return
    with pytest.raises(DataError) as refusal:
        case.run(uri, inputs)
    message = str(refusal.value)
    check_text(message, bucket, here)
    assert "\n" not in message and message.startswith(case.message.format(argument=key[1], uri=uri)), message
    assert not objects(bucket)
