"""Property: whatever sequence of decisions (the rule's or drawn at random), outcomes, expiries and retries
reaches the ledger, its running totals equal the sums over its rows exactly (integer minor units, no epsilon),
money at risk never passes the cap and every decision's propensity is a share of the levels it drew among."""

import tempfile
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from promokit.serve.explore import EXPLOIT, EXPLORE
from promokit.serve.ledger import NO_LEVEL, DecisionRequest, Ledger, LedgerConflict, Option, OutcomeRequest

FACES = (1, 333, 1000, 2500)


def decision(key: int, subject: int, level: int, paid_on: str, ttl: float, explore: bool) -> DecisionRequest:
    options = tuple(Option(j, face, 0.1 * (j + 1), face * 0.1 * (j + 1) / 100) for j, face in enumerate(FACES))
    return DecisionRequest(f"r{key}", "merchant" if paid_on == "request" else "customer", f"s{subject}",
                           options[level], (options[0], Option(NO_LEVEL, 0, 0.0, 0.0)), 0.5, "v", False, paid_on, ttl,
                           "explore" if explore else "rule", EXPLORE if explore else EXPLOIT,
                           options if explore else None)


decisions = st.builds(decision, st.integers(0, 9), st.integers(0, 2), st.integers(0, len(FACES) - 1),
                      st.sampled_from(["response", "request"]), st.sampled_from([0.5, 3.0, 100.0]), st.booleans())
outcomes = st.builds(OutcomeRequest, st.integers(0, 9).map(lambda k: f"r{k}"), st.booleans(),
                     st.one_of(st.none(), st.integers(0, 3000)))
batches = st.lists(st.tuples(st.lists(st.one_of(decisions, outcomes), min_size=1, max_size=6),
                             st.floats(0.0, 2.0)), min_size=1, max_size=12)


@pytest.fixture(params=["sqlite", "postgresql"])
def server(request):
    """None for SQLite (a file per example), or a PostgreSQL database the examples share (tables dropped each)."""
    return None if request.param == "sqlite" else request.getfixturevalue("postgres_url")


@contextmanager
def empty_ledger(server: str | None):
    if server is None:
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{Path(folder) / 'l.sqlite'}"
        return
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS decisions, budget, per_level, timeline, schema_version")
    yield server


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cap=st.integers(0, 6000), steps=batches)
def test_running_totals_equal_the_rows_exactly(server, cap, steps):
    """On PostgreSQL this runs both write paths: batches of new decisions as one statement (refused when the cap
    is in reach or an id is known) and lock-first transactions."""
    with empty_ledger(server) as url:
        ledger = Ledger(url, sweep_seconds=0.5)
        ledger.open(cap=cap)
        now, peak = 1000.0, 0
        for items, wait in steps:
            now += wait
            results = ledger.apply(items, now=now)
            assert len(results) == len(items)
            totals, audit = ledger.totals(), ledger.audit()
            for key in ("committed", "paid", "at_risk", "decisions", "responses", "explored"):
                assert isinstance(totals[key], int) and totals[key] == audit[key], key
            assert audit["decisions"] == audit["distinct_ids"] == audit["last_seq"]
            levels = ledger.per_level()
            assert sum(row["paid"] for row in levels) == totals["paid"]
            assert sum(row["decisions"] for row in levels) == totals["decisions"]
            assert sum(row["responses"] for row in levels) == totals["responses"]
            peak = max(peak, totals["at_risk"])
            assert totals["at_risk"] <= cap
            for item, result in zip(items, results):
                if isinstance(result, LedgerConflict):
                    assert result.status in (404, 409)
                elif isinstance(item, DecisionRequest):
                    assert (result["population"], result["subject_id"]) == (item.population, item.subject_id)
                    drawn_among = len(FACES) if result["bucket"] == EXPLORE else 1
                    assert result["propensity"] * drawn_among in range(1, drawn_among + 1)
        assert all(row["at_risk"] <= cap for row in ledger.timeline()) and peak <= cap
        ledger.close()
