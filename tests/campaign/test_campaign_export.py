"""`promokit campaign export`: the ledger's decisions and outcomes as a log in the incentive contract, with the
propensity of each level served; joined to features, a customers table for `incentive train`."""

import numpy as np
import pandas as pd
import pytest
from test_serve import LEVELS, TOKEN, curves, plan_folder, score_frame
from test_serve_explore import version_2_ledger
from typer.testing import CliRunner

from promokit.campaign import build as build_campaign
from promokit.cli import app
from promokit.data import DataError
from promokit.serve.decision_rule import DecisionRule
from promokit.serve.explore import EXPLORE
from promokit.serve.export import export_log
from promokit.serve.ledger import Ledger, OutcomeRequest

runner = CliRunner()
T0 = 1_000.0


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_line_error(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def make_campaign(path, prefix="c", **options):
    f = curves(40)
    plan_folder(path / "plan", f)
    return build_campaign(path / "campaign", score_frame(f, prefix), path / "plan", cap="10000", explore=0.5,
                          explore_seed=11, coupon_ttl=100.0, cold_start="none", **options)


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request, tmp_path):
    if request.param == "sqlite":
        return None  # the campaign's own
    return request.getfixturevalue("postgres_url")


def serve_a_few(campaign, url=None) -> list:
    """Decisions and outcomes written straight to the ledger at known times: c0 redeemed, c1 redeemed at half its
    face value, c2 reported not redeemed, c3 silent until its coupon expired, c4 still open, c0 asked again, and an
    unknown id answered with no coupon (cold start none). Returns the first five proposals."""
    ledger = Ledger(url or f"sqlite:///{campaign.path / 'ledger.sqlite'}")
    ledger.open(campaign.config.cap_minor)
    rule = DecisionRule(campaign)
    proposals = [rule.propose(f"r{i}", "customer", f"c{i}")[0] for i in range(4)]
    ledger.apply(proposals, now=T0)
    ledger.apply([OutcomeRequest("r0", True, None), OutcomeRequest("r1", True, proposals[1].chosen.face // 2),
                  OutcomeRequest("r2", False, None)], now=T0 + 10)
    later = [rule.propose("r4", "customer", "c4")[0], rule.propose("r5", "customer", "c0")[0],
             rule.propose("r6", "customer", "somebody-new")[0]]
    ledger.apply(later, now=T0 + 150)
    ledger.close()
    return proposals + later[:1]


def expected_log(proposals, redeemed, paid) -> pd.DataFrame:
    return pd.DataFrame({
        "customer_id": [p.subject_id for p in proposals], "level": [LEVELS[p.chosen.index] for p in proposals],
        "redeemed": np.array(redeemed, dtype="int64"), "paid": np.array(paid, dtype="float64"),
        "propensity": [0.25 if p.bucket == EXPLORE else 1.0 for p in proposals],
        "bucket": [p.bucket for p in proposals], "request_id": [p.request_id for p in proposals],
        "decided_at": pd.to_datetime([T0] * len(proposals), unit="s", utc=True)})


@pytest.mark.filterwarnings("ignore:.*open coupon:UserWarning")
def test_the_export_is_the_ledgers_decisions_and_outcomes_exactly(tmp_path, ledger_url):
    campaign = make_campaign(tmp_path)
    proposals = serve_a_few(campaign, ledger_url)
    assert {p.bucket for p in proposals[:4]} == {"explore", "exploit"}  # the seed gives both buckets
    with pytest.warns(UserWarning, match="1 customer decisions have an open coupon"):
        export = export_log(campaign.path, ledger_url, now=T0 + 160)
    faces = [p.chosen.face for p in proposals]
    expected = expected_log(proposals[:4], [1, 1, 0, 0], [faces[0] / 100, faces[1] // 2 / 100, 0, 0])
    pd.testing.assert_frame_equal(export.log, expected)
    assert export.decisions == 7 and export.left_out == {"later decisions of a subject": 1, "no coupon": 1,
                                                         "open": 1}
    every = export_log(campaign.path, ledger_url, every_decision=True, now=T0 + 300)  # c4 and r5 expired by now
    assert every.log["request_id"].tolist() == ["r0", "r1", "r2", "r3", "r4", "r5"]
    assert every.log["redeemed"].tolist() == [1, 1, 0, 0, 0, 0] and every.left_out["no coupon"] == 1
    explored = export_log(campaign.path, ledger_url, bucket="explore", now=T0 + 160).log
    pd.testing.assert_frame_equal(explored, expected[expected["bucket"] == EXPLORE].reset_index(drop=True))


def test_features_are_joined_by_id_into_a_customers_table_incentive_train_reads(tmp_path):
    from promokit.incentive.contract import check_tables

    campaign = make_campaign(tmp_path, prefix="")  # ids "0", "1", …: a table keyed by the integers 0, 1, … joins
    rule, ledger = DecisionRule(campaign), Ledger(f"sqlite:///{campaign.path / 'ledger.sqlite'}")
    ledger.open(campaign.config.cap_minor)
    ledger.apply([rule.propose(f"r{i}", "customer", str(i))[0] for i in range(40)], now=T0)
    ledger.apply([OutcomeRequest(f"r{i}", i % 3 == 0, None) for i in range(40)], now=T0 + 1)
    ledger.close()
    features = pd.DataFrame({"customer_id": range(1, 40), "age": np.arange(1, 40) * 2.0,
                             "city": [f"k{i % 4}" for i in range(1, 40)], "level": 5.0, "redeemed": 1})
    with pytest.warns(UserWarning) as caught:
        export = export_log(campaign.path, features=features, now=T0 + 2)
    messages = " ".join(str(w.message) for w in caught)
    assert "columns ['level', 'redeemed'] are another experiment's labels" in messages
    assert "1 of the log's 40 rows have an id the table does not hold" in messages and "'0'" in messages
    log = export.log
    assert list(log.columns) == ["customer_id", "level", "redeemed", "age", "city"] and len(log) == 39
    assert export.left_out["not in features"] == 1
    assert (log["age"] == log["customer_id"].astype(int) * 2.0).all()  # each row its own customer's features
    assert (log["redeemed"] == (log["customer_id"].astype(int) % 3 == 0)).all()
    merchants = pd.DataFrame({"merchant_id": ["m0", "m1"], "level": [0.0, 5.0], "shares": [1, 2],
                              "prior_shares": [1.0, 1.0]})
    edges = pd.DataFrame({"customer_id": log["customer_id"], "merchant_id": "m0"})
    tables = check_tables(log, merchants, edges, levels=LEVELS)
    assert tables.customer_spec.numeric == ["age"] and tables.customer_spec.categorical == ["city"]


def test_a_ledger_from_before_exploration_is_read_as_the_rules_without_migrating_it(tmp_path):
    campaign = make_campaign(tmp_path)
    version_2_ledger(f"sqlite:///{campaign.path / 'ledger.sqlite'}")
    log = export_log(campaign.path, now=1e10).log
    assert log[["customer_id", "level", "redeemed", "propensity", "bucket"]].to_dict("records") == [
        {"customer_id": "c0", "level": 5.0, "redeemed": 0, "propensity": 1.0, "bucket": "exploit"}]
    assert Ledger(f"sqlite:///{campaign.path / 'ledger.sqlite'}").schema_version() == 2


def test_the_export_command_writes_the_log(tmp_path):
    campaign = make_campaign(tmp_path)
    serve_a_few(campaign)  # long ago: every coupon has expired by now
    result = invoke("campaign", "export", "--campaign", campaign.path, "--out", tmp_path / "log.parquet")
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert said.startswith("5 rows written to") and "from 7 customer decisions (left out: 1 later decisions of a " \
        "subject, 1 no coupon)" in said
    log = pd.read_parquet(tmp_path / "log.parquet")
    pd.testing.assert_frame_equal(log, export_log(campaign.path).log)
    result = invoke("campaign", "export", "--campaign", campaign.path, "--out", tmp_path / "log.csv", "--bucket",
                    "exploit")
    assert result.exit_code == 0 and set(pd.read_csv(tmp_path / "log.csv")["bucket"]) == {"exploit"}


# -------------------------------------------------------------------------------------------------- bad input


@pytest.fixture
def served(tmp_path):
    campaign = make_campaign(tmp_path, merchants=score_frame(curves(5, seed=2), prefix="m"))
    serve_a_few(campaign)
    pd.DataFrame({"customer_id": ["c0", "c1", "c1"], "x": [1, 2, 3]}).to_csv(tmp_path / "repeated.csv", index=False)
    pd.DataFrame({"user_id": ["c0"], "x": [1]}).to_csv(tmp_path / "no_id.csv", index=False)
    (tmp_path / "folder.parquet").mkdir()
    return campaign.path


@pytest.mark.parametrize("args, message", [
    (["--campaign", "{tmp}/nope"], "is not a campaign directory"),
    (["--ledger", "mysql://u@h/db"], "--ledger must be sqlite:///FILE or postgresql://USER@HOST/DB"),
    (["--ledger", "sqlite:///{tmp}/missing.sqlite"], "no ledger at"),
    (["--customers", "{tmp}/repeated.csv"], "features: 1 repeated customer_id values"),
    (["--customers", "{tmp}/no_id.csv"], "features: "),
    (["--customers", "{tmp}/absent.parquet"], "no such file"),
    (["--out", "{tmp}/log.txt"], "--out must be a file ending in .parquet or .csv"),
    (["--out", "{tmp}/folder.parquet"], "--out must be a file ending in .parquet or .csv"),
    (["--population", "merchant", "--customers", "{tmp}/no_id.csv"], "--customers joins customer features"),
    (["--population", "shop"], "population must be one of ['customer', 'merchant']"),
    (["--bucket", "both"], "bucket must be one of ['all', 'explore', 'exploit']"),
    (["--population", "merchant"], "holds no merchant decisions"),
])
def test_bad_export_inputs_are_one_line_errors(served, tmp_path, args, message):
    given = [a.format(tmp=tmp_path) for a in args]
    options = {"--campaign": served, "--out": tmp_path / "log.parquet", **dict(zip(given[::2], given[1::2]))}
    one_line_error(invoke("campaign", "export", *[x for kv in options.items() for x in kv]), message)
    assert not (tmp_path / "log.parquet").is_file()


def test_export_without_a_ledger_or_decisions_is_a_one_line_error(tmp_path, postgres_url):
    campaign = make_campaign(tmp_path)
    out = ["--out", tmp_path / "log.parquet"]
    one_line_error(invoke("campaign", "export", "--campaign", campaign.path, *out), "no ledger at")
    one_line_error(invoke("campaign", "export", "--campaign", campaign.path, "--ledger", postgres_url, *out),
                   "holds no decisions table")
    Ledger(f"sqlite:///{campaign.path / 'ledger.sqlite'}").open(100)
    one_line_error(invoke("campaign", "export", "--campaign", campaign.path, *out), "holds no customer decisions")
    one_line_error(invoke("campaign", "export", "--campaign", campaign.path, "--ledger",
                          "postgresql://nobody@127.0.0.1:1/none", *out), "cannot read the ledger at 127.0.0.1:1/none")
    without = make_campaign(tmp_path / "customers-only")
    one_line_error(invoke("campaign", "export", "--campaign", without.path, "--population", "merchant", *out),
                   "has no merchants")


def test_an_export_of_only_open_coupons_says_why_it_is_empty(tmp_path):
    campaign = make_campaign(tmp_path)
    ledger = Ledger(f"sqlite:///{campaign.path / 'ledger.sqlite'}")
    ledger.open(campaign.config.cap_minor)
    ledger.apply([DecisionRule(campaign).propose("r0", "customer", "c0")[0]])  # now: open for 100 s
    ledger.close()
    with pytest.warns(UserWarning, match="1 customer decisions have an open coupon"), \
            pytest.raises(DataError, match=r"nothing to export: every one of the 1 customer decisions in the ledger "
                                           r"is left out \(1 open\)"):
        export_log(campaign.path)


@pytest.mark.parametrize("args, message", [
    (["--explore", "1"], r"explore must be a share in [0, 1), got 1.0"),
    (["--explore", "-0.1"], "explore must be a share"), (["--explore", "nan"], "explore must be a share"),
    (["--explore", "inf"], "explore must be a share"), (["--explore-seed", "-1"], "explore_seed must be an integer"),
    (["--explore-seed", str(2**64)], "explore_seed must be an integer"),
])
def test_bad_exploration_settings_are_one_line_errors(tmp_path, args, message):
    f = curves(5)
    plan_folder(tmp_path / "plan", f)
    score_frame(f).to_parquet(tmp_path / "scores.parquet")
    one_line_error(invoke("campaign", "build", "--out", tmp_path / "c", "--scores", tmp_path / "scores.parquet",
                          "--budget-plan", tmp_path / "plan", "--cap", 10, *args), message)


def test_serve_explore_is_checked_before_the_service_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("PROMOKIT_API_TOKEN", TOKEN)
    campaign = make_campaign(tmp_path)
    one_line_error(invoke("serve", "--campaign", campaign.path, "--explore", "1.5"), "explore must be a share")


# ------------------------------------------------------------------------------------------ the library entry points


def test_campaign_build_from_python_gives_what_the_command_builds(tmp_path):
    import json

    import promokit.campaign
    import promokit.serve

    f = curves(20)
    plan_folder(tmp_path / "plan", f)
    score_frame(f).to_parquet(tmp_path / "scores.parquet")
    result = invoke("campaign", "build", "--out", tmp_path / "cli", "--scores", tmp_path / "scores.parquet",
                    "--budget-plan", tmp_path / "plan", "--cap", "500", "--explore", 0.25, "--pacing-every", 64)
    assert result.exit_code == 0 and "exploring 25.00% of subjects" in " ".join(result.output.split()), result.output
    campaign = promokit.campaign.build(tmp_path / "py", tmp_path / "scores.parquet", tmp_path / "plan", "500",
                                       explore=0.25, pacing=promokit.campaign.Pacing(every=64))
    assert campaign.config.cap == 500 and campaign.config.coupon_ttl_seconds == 7 * 24 * 3600
    cli, py = (json.loads((tmp_path / d / "campaign.json").read_text()) for d in ("cli", "py"))
    assert cli == py
    for ttl in ("12h", "43200"):  # a duration, or the old spelling: a number of seconds
        result = invoke("campaign", "build", "--out", tmp_path / ttl, "--scores", tmp_path / "scores.parquet",
                        "--budget-plan", tmp_path / "plan", "--cap", "500", "--coupon-ttl", ttl)
        assert result.exit_code == 0, result.output
        assert json.loads((tmp_path / ttl / "campaign.json").read_text())["coupon_ttl_seconds"] == 43200
    result = invoke("campaign", "build", "--out", tmp_path / "bad", "--scores", tmp_path / "scores.parquet",
                    "--budget-plan", tmp_path / "plan", "--cap", "500", "--coupon-ttl", "a week")
    assert result.exit_code == 2 and "--coupon-ttl: 'a week' is not a duration; give a number and a unit" in result.output
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "cli" / "customers.parquet"),
                                  pd.read_parquet(tmp_path / "py" / "customers.parquet"))
    for name in ("ids", "scores", "mean"):
        assert np.array_equal(np.load(tmp_path / "cli" / "lookup" / "customer" / f"{name}.npy"),
                              np.load(tmp_path / "py" / "lookup" / "customer" / f"{name}.npy"))


def test_campaign_build_takes_scores_keyed_by_their_only_id_column_as_incentive_predict_writes_them(tmp_path):
    import promokit.campaign

    f = curves(20)
    plan_folder(tmp_path / "plan", f)
    scores = score_frame(f)
    promokit.campaign.build(tmp_path / "by-user", scores, tmp_path / "plan", "500")
    promokit.campaign.build(tmp_path / "by-customer", scores.rename(columns={"user_id": "customer_id"}),
                            tmp_path / "plan", "500")
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "by-user" / "customers.parquet"),
                                  pd.read_parquet(tmp_path / "by-customer" / "customers.parquet"))


def test_the_service_the_serve_command_starts_is_create_app_on_a_prepared_ledger(tmp_path, monkeypatch):
    """``serve`` migrates the ledger once and hands the campaign to its workers through the environment; each worker
    builds ``promokit.serve.create_app`` from it."""
    from fastapi.testclient import TestClient

    import promokit.serve
    from promokit.serve.app import CAMPAIGN_ENV, EXPLORE_ENV, LEDGER_ENV, TOKEN_ENV, app_from_environment, \
        prepare_workers

    for name in (CAMPAIGN_ENV, LEDGER_ENV, EXPLORE_ENV):
        monkeypatch.setenv(name, "")  # restored after the test
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    campaign = make_campaign(tmp_path)
    loaded, url = prepare_workers(campaign.path, explore=0.2)
    assert url == f"sqlite:///{(campaign.path / 'ledger.sqlite').resolve()}" and loaded.config.explore == 0.2
    assert Ledger(url).schema_version() >= 3  # created and migrated before any worker starts
    with TestClient(app_from_environment()) as client:
        assert client.get("/v1/status").json()["campaign"]["explore"] == 0.2
    with TestClient(promokit.serve.create_app(campaign.path, token=TOKEN)) as client:
        assert client.get("/v1/status").json()["campaign"]["explore"] == 0.5
    with pytest.raises(DataError, match=r"^`ledger_url` must be sqlite:///FILE or postgresql://USER@HOST/DB"):
        prepare_workers(campaign.path, "mysql://u@h/db")
    one_line_error(invoke("serve", "--campaign", campaign.path, "--ledger", "mysql://u@h/db"),
                   "--ledger must be sqlite:///FILE or postgresql://USER@HOST/DB")
