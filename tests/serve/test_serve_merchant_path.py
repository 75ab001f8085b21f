"""The documented merchant path end to end (issue 20): ``incentive predict`` writes merchant scores as normalised
shares (shares / max(prior shares, 1), above 1 for a merchant that out-shares its previous window), and
``allocate budget --merchants`` → ``campaign build --merchants`` → merchant decisions → outcomes → status must
take them on that scale; the customers' table stays a table of probabilities."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from promokit.allocation.budget import decide
from promokit.allocation.tables import BudgetTable
from promokit.campaign import build as build_campaign
from promokit.campaign.directory import load_campaign
from promokit.campaign.lookup import check_table
from promokit.cli import app
from promokit.data import DataError
from promokit.serve.app import create_app

runner = CliRunner()
TOKEN = "t"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
B = 90.0


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _tables(world):
    return ["--customers", world / "customers.parquet", "--merchants", world / "merchants.parquet",
            "--edges", world / "edges.parquet"]


@pytest.fixture(scope="module")
def scores(tmp_path_factory):
    """incentive synth → train (the linear floor, one epoch) → predict, on a 400-customer, 60-merchant world."""
    root = tmp_path_factory.mktemp("merchant_path")
    world, model, out = root / "world", root / "model", root / "scores"
    result = _invoke("incentive", "synth", "--out", world, "--customers", 400, "--merchants", 60, "--seed", 3)
    assert result.exit_code == 0, result.output
    result = _invoke("incentive", "train", *_tables(world), "--model", "lr", "--out", model, "--epochs", 1)
    assert result.exit_code == 0, result.output
    result = _invoke("incentive", "predict", "--model", model, *_tables(world), "--out", out)
    assert result.exit_code == 0, result.output
    return out


def _build(scores, root, paid_on: str):
    """allocate budget --merchants → campaign build --merchants, both with the same --merchant-paid-on."""
    plan, campaign = root / f"plan-{paid_on}", root / f"campaign-{paid_on}"
    result = _invoke("allocate", "budget", "--scores", scores / "customers.parquet", "--merchants",
                     scores / "merchants.parquet", "--merchant-paid-on", paid_on, "--ratio", B, "--out", plan)
    assert result.exit_code == 0, result.output
    result = _invoke("campaign", "build", "--out", campaign, "--scores", scores / "customers.parquet",
                     "--merchants", scores / "merchants.parquet", "--budget-plan", plan, "--cap", 1e6,
                     "--merchant-paid-on", paid_on)
    assert result.exit_code == 0, result.output
    return plan, campaign


@pytest.mark.parametrize("paid_on", ["response", "request"])
def test_predict_allocate_build_serve_merchants(scores, tmp_path, paid_on):
    merchants = pd.read_parquet(scores / "merchants.parquet")
    shares = merchants.drop(columns="user_id").to_numpy()
    assert shares.max() > 1 and (shares >= 0).all()  # the scale of issue 20: normalised shares, not probabilities

    plan, folder = _build(scores, tmp_path, paid_on)
    campaign = load_campaign(folder)
    assert {p: len(t) for p, t in campaign.populations.items()} == {"customer": 400, "merchant": 60}
    assert campaign.config.merchant_paid_on == paid_on and campaign.config.B == B
    table = campaign.populations["merchant"]
    np.testing.assert_allclose([table.scores[table.row(str(m))] for m in merchants.user_id], shares)
    levels, lam = campaign.levels, campaign.config.lam
    offline = pd.read_parquet(plan / "plan.parquet").query("population == 'merchant'").set_index("user_id")["level"]

    known = [str(i) for i in merchants.user_id.iloc[:8]]
    asked = known + ["m-unknown-1", "m-unknown-2"]
    with TestClient(create_app(folder, token=TOKEN)) as client:
        answers = {}
        for i, merchant in enumerate(asked):
            response = client.post("/v1/decisions", json={"request_id": f"m{i}", "merchant_id": merchant},
                                   headers=AUTH)
            assert response.status_code == 200, response.text
            answers[merchant] = response.json()
        first = str(pd.read_parquet(scores / "customers.parquet").user_id.iloc[0])
        customer = client.post("/v1/decisions", json={"request_id": "c0", "customer_id": first}, headers=AUTH)
        assert customer.status_code == 200 and customer.json()["population"] == "customer"
        retry = client.post("/v1/decisions", json={"request_id": "m0", "merchant_id": known[0]}, headers=AUTH)
        assert retry.json()["replayed"] and retry.json()["level_index"] == answers[known[0]]["level_index"]

        # eq. 20 (paid on request: cost r − B) or eq. 19's form (paid on response: cost f·(r − B)) at λ*, B
        agree = 0
        for merchant, answer in answers.items():
            row = table.row(merchant)
            cold = row is None
            f = table.mean if cold else table.scores[row]
            cost = (levels - B) if paid_on == "request" else f * (levels - B)
            j = int(decide(f, cost, lam))
            assert answer["population"] == "merchant" and answer["subject_id"] == merchant
            assert answer["cold_start"] == cold and answer["reason"] == "rule"
            assert answer["level_index"] == j and float(answer["level"]) == pytest.approx(levels[j])
            assert answer["expected_response"] == pytest.approx(f[j])  # a share: may be above 1
            face_cost = levels[j] if paid_on == "request" else levels[j] * f[j]
            assert float(answer["expected_cost"]) == pytest.approx(face_cost, rel=1e-6)
            agree += not cold and offline[merchant] == levels[j]
        assert agree >= len(known) - 1  # λ* at B reproduces the offline plan but for the marginal request

        faces = {m: levels[a["level_index"]] for m, a in answers.items()}
        outcomes = [("m0", known[0], True, None), ("m1", known[1], False, None),
                    ("m2", known[2], True, faces[known[2]] / 2), ("m8", "m-unknown-1", True, None)]
        for request_id, merchant, redeemed, amount in outcomes:
            body = {"request_id": request_id, "redeemed": redeemed, **({} if amount is None else {"amount": amount})}
            if paid_on == "request":
                body.pop("amount", None)  # the commission was paid when issued: nothing more to pay
            response = client.post("/v1/outcomes", json=body, headers=AUTH)
            assert response.status_code == 200, response.text
            assert response.json()["redeemed"] == redeemed
        again = client.post("/v1/outcomes", json={"request_id": "m1", "redeemed": False}, headers=AUTH)
        assert again.status_code == 200 and again.json()["replayed"]
        unknown = client.post("/v1/outcomes", json={"request_id": "nope", "redeemed": True}, headers=AUTH)
        assert unknown.status_code == 404
        status = client.get("/v1/status").json()

    budget = status["budget"]
    customer_face = levels[customer.json()["level_index"]]
    merchant_faces = sum(faces.values())
    if paid_on == "request":  # eq. 20: every merchant commission is paid when issued, outcomes add nothing
        paid, committed = merchant_faces, customer_face
    else:
        paid = faces[known[0]] + faces[known[2]] / 2 + faces["m-unknown-1"]
        committed = customer_face + merchant_faces - faces[known[0]] - faces[known[1]] - faces[known[2]] \
            - faces["m-unknown-1"]
    assert float(budget["paid"]) == pytest.approx(paid)
    assert float(budget["committed"]) == pytest.approx(committed)
    assert float(budget["at_risk"]) == pytest.approx(paid + committed) and float(budget["cap"]) == pytest.approx(1e6)
    assert budget["decisions"] == len(asked) + 1 and budget["responses"] == 3 and budget["replays"] >= 1
    assert status["campaign"]["populations"] == {"customer": 400, "merchant": 60}
    by_level = [row for row in status["levels"] if row["population"] == "merchant"]
    assert sum(row["decisions"] for row in by_level) == len(asked)
    assert sum(row["responses"] for row in by_level) == 3
    assert sum(float(row["paid"]) for row in by_level) == pytest.approx(paid if paid_on == "response"
                                                                        else merchant_faces)
    assert {row["level_index"] for row in by_level} == {a["level_index"] for a in answers.values()}


# ------------------------------------------------------------------------------------- the check on its own

LEVELS = [0.0, 5.0, 10.0]


def _frame(values, prefix):
    values = np.asarray(values, dtype=np.float64)
    return pd.DataFrame({"user_id": [f"{prefix}{i}" for i in range(len(values))],
                         **{f"score_{level:g}": values[:, j] for j, level in enumerate(LEVELS)}})


@pytest.fixture
def plan(tmp_path):
    folder = tmp_path / "plan"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps({"problem": "budget", "form": "ratio", "B": 4.0, "lam": 0.01,
                                                    "levels": LEVELS}))
    return folder


CUSTOMERS = [[0.1, 0.2, 0.3], [0.05, 0.1, 0.4], [0.0, 0.5, 1.0]]


def test_merchant_shares_above_one_are_accepted(tmp_path, plan):
    merchants = _frame([[0.4, 1.5, 11.7], [0.0, 0.0, 0.0], [2.0, 3.0, 4.0]], "m")
    campaign = build_campaign(tmp_path / "c", _frame(CUSTOMERS, "c"), plan, cap=100.0, merchants=merchants)
    assert campaign.populations["merchant"].scores.max() == 11.7
    assert load_campaign(campaign.path).populations["merchant"].scores[0, 2] == 11.7


@pytest.mark.parametrize("bad", [-0.5, float("nan"), float("inf")])
def test_merchant_shares_negative_or_not_finite_are_refused_in_one_line(tmp_path, plan, bad):
    values = np.array([[0.4, 1.5, 11.7], [0.1, 0.2, 0.3], [2.0, 3.0, 4.0]])
    values[1, 1] = bad
    with pytest.raises(DataError) as error:  # the table reader refuses it first, naming column, count and row
        build_campaign(tmp_path / "c", _frame(CUSTOMERS, "c"), plan, cap=100.0, merchants=_frame(values, "m"))
    message = str(error.value)
    assert "\n" not in message and "score_5" in message and "1 of 3 rows" in message and "m1" in message

    table = BudgetTable(np.array(["m0", "m1", "m2"], dtype=object), np.array(LEVELS), values, None, None, "wide")
    with pytest.raises(DataError) as error:  # and the campaign's own check, should a table get past the reader
        check_table("merchant", table, LEVELS)
    message = str(error.value)
    assert message == (f"the merchant score table has 1 rows with a share that is missing, infinite or negative, "
                       f"e.g. score_5 = {float(bad)!r} for user_id 'm1'")


def test_customer_scores_must_still_be_probabilities(tmp_path, plan):
    customers = np.array(CUSTOMERS)
    customers[2, 2] = 1.5
    with pytest.raises(DataError, match=r"^the customer score table has 1 rows with a response probability outside "
                                        r"\[0, 1\] or missing, e.g. score_10 = 1.5 for user_id 'c2'$"):
        build_campaign(tmp_path / "c", _frame(customers, "c"), plan, cap=100.0,
                       merchants=_frame([[0.4, 1.5, 11.7]] * 3, "m"))
    table = BudgetTable(np.array(["c0", "c1", "c2"], dtype=object), np.array(LEVELS),
                        np.where(customers > 1, math.nan, customers), None, None, "wide")
    with pytest.raises(DataError, match="1 rows with a response probability outside"):
        check_table("customer", table, LEVELS)


def test_campaign_build_cli_refuses_a_negative_merchant_share_in_one_line(tmp_path, plan):
    _frame(CUSTOMERS, "c").to_parquet(tmp_path / "customers.parquet")
    _frame([[0.4, 1.5, 11.7], [0.1, -0.2, 0.3]], "m").to_csv(tmp_path / "merchants.csv", index=False)
    result = _invoke("campaign", "build", "--out", tmp_path / "c", "--scores", tmp_path / "customers.parquet",
                     "--merchants", tmp_path / "merchants.csv", "--budget-plan", plan, "--cap", 100)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "score_5" in result.output and "m1" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_campaign_build_serves_merchants_as_the_plan_paid_them(scores, tmp_path):
    """allocate budget records --merchant-paid-on in its report; campaign build takes it from there and refuses
    another (λ* solved under eq. 20's costs served under eq. 16's would overspend silently)."""
    plan, _ = _build(scores, tmp_path, "request")
    assert json.loads((plan / "report.json").read_text())["merchant_paid_on"] == "request"
    common = ["campaign", "build", "--scores", scores / "customers.parquet", "--merchants",
              scores / "merchants.parquet", "--budget-plan", plan, "--cap", 1e6]
    result = _invoke(*common, "--out", tmp_path / "default")
    assert result.exit_code == 0, result.output
    assert load_campaign(tmp_path / "default").config.merchant_paid_on == "request"
    result = _invoke(*common, "--out", tmp_path / "conflict", "--merchant-paid-on", "response")
    assert result.exit_code == 2 and "solved with merchants paid on 'request'" in result.output
    assert len(result.output.strip().splitlines()) == 1
