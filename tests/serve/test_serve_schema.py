"""The OpenAPI schema is what the service does: schemathesis generates requests from it, valid and invalid, sends
them to a running ``promokit serve`` and checks every answer with its conformance checks (no 5xx; status codes,
content types, headers and response bodies as documented; invalid data refused).

Schemathesis's pytest plugin does not run under pytest 9 here ('Function' object has no attribute '_nodeid'), so
its strategies are drawn with hypothesis directly, one test per operation and generation mode.
"""

import pandas as pd
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from test_serve import TOKEN, curves, plan_folder, score_frame

from promokit.campaign import build as build_campaign
from promokit.serve.replay import running_service

OPERATIONS = ["POST /v1/decisions", "POST /v1/outcomes", "GET /v1/assignments/{user_id}", "POST /v1/campaign/switch",
              "GET /v1/status", "GET /metrics", "GET /", "GET /livez", "GET /readyz"]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    path = tmp_path_factory.mktemp("schema")
    f = curves(40)
    plan_folder(path / "plan", f)
    build_campaign(path / "campaign", score_frame(f), path / "plan", cap="50", explore=0.5,  # answers of each bucket
                   merchants=score_frame(curves(10, seed=2), prefix="m"),
                   quota_plan=pd.DataFrame({"user_id": ["c1"], "fund": ["F1"]}))
    with running_service(path / "campaign", TOKEN) as base:
        yield schemathesis.openapi.from_url(f"{base}/openapi.json")


def test_the_schema_lists_every_operation(api):
    assert sorted(result.ok().label for result in api.get_all_operations()) == sorted(OPERATIONS)


POSITIVE, NEGATIVE = schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE
WITH_INPUTS = OPERATIONS[:4]  # the others take nothing that could be invalid


@pytest.mark.parametrize("label, mode", [(label, POSITIVE) for label in OPERATIONS]
                         + [(label, NEGATIVE) for label in WITH_INPUTS])
def test_the_service_conforms_to_its_schema(api, label, mode):
    conforms(api.find_operation_by_label(label), mode)


def conforms(operation, mode) -> None:
    """Send 25 requests of ``mode`` generated for ``operation`` and check each answer."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=25, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case):
        case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"})

    check()


def test_a_customers_only_campaign_accepts_what_its_schema_offers(tmp_path):
    """A campaign without merchants refuses merchant_id: its schema does not offer it (positive data only)."""
    f = curves(10)
    plan_folder(tmp_path / "plan", f)
    build_campaign(tmp_path / "campaign", score_frame(f), tmp_path / "plan", cap="50")
    with running_service(tmp_path / "campaign", TOKEN) as base:
        conforms(schemathesis.openapi.from_url(f"{base}/openapi.json").find_operation_by_label(OPERATIONS[0]),
                 POSITIVE)
