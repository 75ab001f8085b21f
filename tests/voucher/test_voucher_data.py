"""Voucher data: the three-table contract, the synthetic world, the leak-free history and AmExpert (fake folder)."""

import numpy as np
import pandas as pd
import pytest

from promokit.data import DataError
from promokit.experiments.voucher.world import make_world
from promokit.metrics import auc
from promokit.voucher.amexpert import coupon_descriptors, load_amexpert
from promokit.voucher.contract import check_tables
from promokit.voucher.history import default_cuts, redeemed_history, split_by_time


# ------------------------------------------------------------------------------------------------ contract
def tiny_sessions() -> pd.DataFrame:
    return pd.DataFrame({
        "session_id": [11, 12, 13, 14, 15],
        "user_id": [1, 1, 1, 1, 2],
        "voucher_id": [7, 8, 9, 7, 7],
        "min_spend": [0.0, 20.0, 50.0, 0.0, 20.0],
        "discount": [2.0, 5.0, 10.0, 2.0, 5.0],
        "collect_time": ["2024-01-03", "2024-01-01", "2024-01-02", "2024-01-10", "2024-01-02"],
        "outcome_time": ["2024-01-04", "2024-01-05", "2024-01-02 12:00", "2024-01-11", "2024-01-03"],
        "redeemed": [1, 1, 1, 0, 1],
        "age": ["a", "b", "a", "a", "c"],
        "redeem_time": ["2024-01-04", "2024-01-05", "2024-01-02 12:00", None, "2024-01-03"],
    })


def tiny_events() -> pd.DataFrame:
    return pd.DataFrame({
        "session_id": [12, 12, 12, 13, 11, 14],
        "item_id": [100, 101, 100, 102, 101, 100],
        "action": ["atc", "ORD ", "click", "atc", "ord", "atc"],
        "action_time": ["2024-01-01 10:00", "2023-12-31", "2024-01-01 11:00", "2024-01-01", "2024-01-03 08:00",
                        "2024-01-12"],
    })


def tiny_items() -> pd.DataFrame:
    return pd.DataFrame({"item_id": [100, 101, 102], "category": ["x", "y", "x"], "brand": [1, 2, 3],
                         "price_level": [0, 2, 1]})


def test_check_tables_contract_form():
    tables = check_tables(tiny_sessions(), tiny_events(), tiny_items(), categorical=["age"])
    s = tables.sessions
    assert list(s["session_id"]) == [12, 13, 15, 11, 14]  # sorted by collect_time, stable on ties
    assert s.index.equals(pd.RangeIndex(5))
    assert "redeem_time" not in s.columns  # only whitelisted columns survive
    assert tables.categorical == ["user_id", "voucher_id", "age"] and tables.numeric == ["min_spend", "discount"]
    assert tables.spec.labels == {"redeemed": "redeemed"} and "redeemed" not in tables.spec.features
    assert s["collect_time"].dtype == "datetime64[ns]" and s["redeemed"].dtype == np.float32
    e = tables.events
    # the click is ignored, the event after session 14's outcome (01-11) is dropped
    assert tables.repairs["click_events_ignored"] == 1 and tables.repairs["events_after_outcome_dropped"] == 1
    assert list(e["session_id"]) == [12, 12, 13, 11] and list(e["action"]) == ["ord", "atc", "atc", "ord"]
    assert list(e["session"]) == [0, 0, 1, 3]  # row index of the session, events sorted by (session, time)
    assert list(e["pre"]) == [True, False, True, False]
    kept = check_tables(tiny_sessions(), tiny_events(), tiny_items(), keep_clicks=True)
    assert (kept.events["action"] == "click").sum() == 1


def test_outcome_time_from_validity():
    sessions = tiny_sessions().drop(columns="outcome_time")
    with pytest.raises(DataError, match="outcome_time.*validity"):
        check_tables(sessions, None, tiny_items())
    tables = check_tables(sessions, None, tiny_items(), validity="2D")
    s = tables.sessions
    assert ((s["outcome_time"] - s["collect_time"]) == pd.Timedelta("2D")).all()
    assert tables.repairs["outcome_time_from_validity"] == 5
    with pytest.raises(DataError, match=r"^validity: 'soon' is not a duration; give a number and a unit: 7D \(days\)"):
        check_tables(sessions, None, tiny_items(), validity="soon")
    in_seconds = check_tables(sessions, None, tiny_items(), validity=2 * 24 * 3600)  # the bare number: seconds
    assert in_seconds.sessions["outcome_time"].equals(s["outcome_time"])


@pytest.mark.parametrize("value, expected", [("7D", "7 days"), ("7d", "7 days"), ("12h", "12 hours"),
                                             ("30m", "30 minutes"), ("604800s", "7 days"), ("604800", "7 days"),
                                             (604800, "7 days"), (1.5, "1.5 seconds"), ("1.5h", "90 minutes")])
def test_one_parser_reads_every_duration(value, expected):
    from promokit.data.durations import parse_duration

    assert parse_duration(value, "validity") == pd.Timedelta(expected)


@pytest.mark.parametrize("value", ["7 days", "1M", "-1s", -5, float("inf"), None, True, "7D12h"])
def test_a_duration_in_another_form_is_refused_naming_the_forms(value):
    from promokit.data.durations import parse_duration

    with pytest.raises(DataError, match=r"^coupon_ttl.* (not a duration; give a number and a unit: 7D \(days\), 12h "
                                        r"\(hours\), 30m \(minutes\), 604800s \(seconds\); or a bare number of "
                                        r"seconds|must be a duration of at least 0)"):
        parse_duration(value, "coupon_ttl")


def test_optional_terms_labels_and_numeric_times():
    sessions = tiny_sessions().drop(columns=["min_spend", "discount"])
    sessions["redeemed"] = [1, None, 0, 1, 0]
    unix_seconds = (pd.to_datetime(sessions["collect_time"]) - pd.Timestamp("1970-01-01")) // pd.Timedelta("1s")
    sessions["collect_time"] = unix_seconds.astype(np.int64)
    tables = check_tables(sessions, None, tiny_items(), terms=False, require_labels=False)
    assert tables.numeric == [] and "min_spend" not in tables.sessions.columns
    assert tables.sessions["redeemed"].isna().sum() == 1
    assert tables.sessions["collect_time"].min() == pd.Timestamp("2024-01-01")
    assert len(tables.events) == 0 and tables.events["session"].dtype == np.int64


def _set(table, column, row, value):
    def mutate(frames):
        frame = frames[table]
        frame[column] = frame[column].astype(object)
        frame.loc[row, column] = value
    return mutate


def _rename(table, old, new):
    def mutate(frames):
        frames[table] = frames[table].rename(columns={old: new})
    return mutate


ERRORS = [
    (_rename("sessions", "collect_time", "colect_time"), r"'collect_time'.*missing.*did you mean 'colect_time'"),
    (_rename("events", "action", "act"), r"events: column 'action'.*missing"),
    (_rename("items", "brand", "brnd"), r"items: column 'brand'.*missing"),
    (_set("sessions", "redeemed", 2, 2), r"'redeemed' must be 0/1 but has 1 .* in 5 rows, e.g. row 2"),
    (_set("sessions", "redeemed", 1, None), r"'redeemed' must be 0/1 but has 1 missing"),
    (_set("sessions", "session_id", 4, 11), r"'session_id' has 2 rows with a duplicate id in 5 rows"),
    (_set("events", "session_id", 3, 99), r"'session_id' has 1 values of unknown sessions in 6 rows, e.g. row 3"),
    (_set("events", "item_id", 0, 999), r"'item_id' has 1 items missing from the items table.*unknown_items"),
    (_set("events", "action", 4, "view"), r"'action' has 1 values outside \['atc', 'ord', 'click'\]"),
    (_set("sessions", "collect_time", 0, "not a date"), r"'collect_time' has 1 values that are not times"),
    (_set("events", "action_time", 2, "yesterday"), r"events: column 'action_time' has 1 values that are not times"),
    (_set("sessions", "outcome_time", 3, "2023-12-01"), r"times out of order.*1 of 5 rows, e.g. row 3"),
    (_set("sessions", "min_spend", 1, -5.0), r"'min_spend' has 1 negative values in 5 rows, e.g. row 1"),
    (_set("sessions", "discount", 0, None), r"'discount' has 1 missing, non-numeric or infinite values"),
    (_set("sessions", "user_id", 0, None), r"'user_id' has 1 missing values"),
    (_set("items", "item_id", 2, 100), r"items: column 'item_id' has 2 rows with a duplicate id"),
]


@pytest.mark.parametrize(("mutate", "message"), ERRORS)
def test_check_tables_errors(mutate, message):
    frames = {"sessions": tiny_sessions(), "events": tiny_events(), "items": tiny_items()}
    mutate(frames)
    with pytest.raises(DataError, match=message) as error:
        check_tables(frames["sessions"], frames["events"], frames["items"], keep_clicks=True)
    assert "\n" not in str(error.value)


def test_numeric_profile_columns_are_checked_on_the_table_as_written():
    """Infinite and text values in a numeric profile column are refused when the tables are read, counting all the
    rows and showing the row as it is in the file (not the training subset, not the time-sorted order)."""
    sessions = tiny_sessions().assign(spend=[1.5, 2.0, np.inf, 3.0, 4.0])
    with pytest.raises(DataError, match=r"numeric column 'spend' has 1 infinite values in 5 rows, e.g. row 2 "
                                        r"\{spend=inf\}"):
        check_tables(sessions, None, tiny_items(), numeric=["spend"])
    spoiled = sessions.assign(spend=pd.Series([1.5, "n/a", 2.0, 3.0, 4.0], dtype=object))
    with pytest.raises(DataError, match=r"'spend' has 1 non-numeric values in 5 rows, e.g. row 1 \{spend='n/a'\}"):
        check_tables(spoiled, None, tiny_items(), numeric=["spend"])


def test_an_infinite_voucher_term_is_named_as_such():
    sessions = tiny_sessions()
    sessions.loc[3, "discount"] = np.inf
    with pytest.raises(DataError, match=r"'discount' has 1 missing, non-numeric or infinite values in 5 rows, "
                                        r"e.g. row 3 \{discount=inf\}"):
        check_tables(sessions, None, tiny_items())


def test_labels_that_are_not_0_1_are_refused_even_where_labels_are_optional():
    sessions = tiny_sessions()
    sessions["redeemed"] = [1, None, 0, 1, 0]  # an outcome not yet known: fine for predict
    assert check_tables(sessions, None, tiny_items(), require_labels=False).sessions["redeemed"].isna().sum() == 1
    sessions["redeemed"] = ["yes", None, "no", "yes", "no"]
    with pytest.raises(DataError, match=r"'redeemed' must be 0/1 but has 4 other values in 5 rows, e.g. row 0"):
        check_tables(sessions, None, tiny_items(), require_labels=False)


def test_ids_spoiled_by_text_say_why_they_match_nothing():
    """A numeric id column with one text value is read as text, and text never equals the other table's numbers."""
    events = tiny_events()
    events["item_id"] = events["item_id"].astype(str)
    events.loc[5, "item_id"] = "abc"
    with pytest.raises(DataError, match=r"6 items missing .* its ids hold text \(1 values are not numbers, e.g. "
                                        r"'abc'\) and the other side numbers"):
        check_tables(tiny_sessions(), events, tiny_items(), keep_clicks=True)
    items = tiny_items().astype({"item_id": object})
    items.loc[2, "item_id"] = "x9"
    with pytest.raises(DataError, match=r"the items table's ids hold text \(1 values are not numbers, e.g. 'x9'\)"):
        check_tables(tiny_sessions(), tiny_events(), items, keep_clicks=True)


def test_options_are_the_check_tables_options_that_read_the_tables():
    sessions = tiny_sessions().assign(spend=[1.0, 2.0, 3.0, 4.0, 5.0])
    tables = check_tables(sessions, None, tiny_items(), categorical=["age"], numeric=["spend"], terms=False,
                          item_features=["brand", "category"])
    assert tables.options == {"categorical": ["age"], "numeric": ["spend"], "terms": False,
                              "item_features": ["brand", "category"]}
    assert check_tables(sessions, None, tiny_items()).options == {
        "categorical": [], "numeric": [], "terms": True, "item_features": ["category", "brand", "price_level"]}


def test_unknown_items_dropped_with_count():
    events = tiny_events()
    events.loc[0, "item_id"] = 999
    tables = check_tables(tiny_sessions(), events, tiny_items(), unknown_items="drop")
    assert tables.repairs["events_of_unknown_items_dropped"] == 1 and 999 not in set(tables.events["item_id"])
    pairs = pd.DataFrame({"voucher_id": [7, 7, 8], "item_id": [100, 555, 101]})
    with pytest.raises(DataError, match="voucher_items: column 'item_id' has 1 items missing"):
        check_tables(tiny_sessions(), None, tiny_items(), voucher_items=pairs)
    tables = check_tables(tiny_sessions(), None, tiny_items(), voucher_items=pairs, unknown_items="drop")
    assert tables.voucher_items.values.tolist() == [[7, 100], [8, 101]]
    assert tables.repairs["voucher_items_of_unknown_items_dropped"] == 1


def test_voucher_items_of_none_of_the_sessions_vouchers_are_refused_in_one_line():
    pairs = pd.DataFrame({"voucher_id": ["7", "8"], "item_id": [100, 101]})  # text ids; the sessions' are numbers
    with pytest.raises(DataError, match=r"voucher_items: column 'voucher_id' holds none of the sessions' vouchers in 2 "
                                        r"rows, e.g. row 0 \{voucher_id='7'\}; its ids hold text"):
        check_tables(tiny_sessions(), None, tiny_items(), voucher_items=pairs)


def test_user_level_log_is_attached_to_sessions():
    log = pd.DataFrame({"user_id": [1, 1, 1, 1, 1, 2, 3],
                        "item_id": [100, 101, 102, 100, 101, 102, 100],
                        "action": ["atc", "atc", "click", "ord", "atc", "atc", "atc"],
                        "action_time": ["2023-12-30", "2023-12-31", "2023-12-31 12:00", "2024-01-02 06:00",
                                        "2024-01-20", "2024-01-02 12:00", "2024-01-01"]})
    tables = check_tables(tiny_sessions(), log, tiny_items(), max_pre_events=1)
    e = tables.events
    # s12 (u1, 01-01 → 01-05) and s13 (u1, 01-02 → 01-02 12:00): the last pre event (12-31; the click is
    # dropped first, so it does not take the one slot) and the 01-02 06:00 order as post; s15 (u2): its event
    # as post; s11 and s14 (u1, later): that order as their one pre event. The 12-30 event (beyond the pre
    # bound), the 01-20 one (after every outcome) and u3's (no session) belong to no session.
    got = list(zip(e["session_id"], e["item_id"], e["pre"]))
    assert got == [(12, 101, True), (12, 100, False), (13, 101, True), (13, 100, False), (15, 102, False),
                   (11, 100, True), (14, 100, True)]
    assert tables.repairs["click_events_ignored"] == 1 and tables.repairs["user_log_events_in_no_session"] == 3


def test_user_level_log_matches_brute_force():
    rng = np.random.default_rng(5)
    s = random_sessions(1, n=120)
    s["session_id"], s["voucher_id"], s["min_spend"], s["discount"] = np.arange(120), 1, 0.0, 1.0
    m = 1500
    log = pd.DataFrame({"user_id": rng.integers(0, 18, m), "item_id": rng.choice([100, 101, 102], m),
                        "action": rng.choice(["atc", "ord"], m),
                        "action_time": pd.Timestamp("2023-12-20") + pd.to_timedelta(rng.integers(0, 80 * 24, m),
                                                                                     unit="h")})
    tables = check_tables(s, log, tiny_items(), max_pre_events=4)
    got = sorted(zip(tables.events["session_id"], tables.events["action_time"], tables.events["item_id"]))
    expected = []
    t = pd.to_datetime(log["action_time"]).to_numpy()
    for _, row in s.iterrows():
        mine = log[log["user_id"].to_numpy() == row["user_id"]]
        times = t[mine.index]
        collect, outcome = row["collect_time"].to_datetime64(), row["outcome_time"].to_datetime64()
        before = mine[times < collect].assign(t=times[times < collect]).sort_values("t", kind="stable").tail(4)
        after = (times >= collect) & (times <= outcome)
        kept = pd.concat([before, mine[after].assign(t=times[after])])
        expected += [(row["session_id"], tt, item) for tt, item in zip(kept["t"], kept["item_id"])]
    # ties in time at the pre bound may pick different events of the same time; compare (session, time) only
    assert [g[:2] for g in got] == sorted(e[:2] for e in expected)


@pytest.mark.parametrize("name", ["redeem_time", "redeemed", "outcome_time", "collect_time"])
def test_post_outcome_columns_are_never_features(name):
    with pytest.raises(DataError, match="never features"):
        check_tables(tiny_sessions(), None, tiny_items(), numeric=[name])


# ------------------------------------------------------------------------------------------------ history
def test_redeemed_history_hand_case():
    tables = check_tables(tiny_sessions(), None, tiny_items())
    # rows: 0 = s12 (u1, 01-01 → 01-05, redeemed), 1 = s13 (u1, 01-02 → 01-02 12:00, redeemed),
    #       2 = s15 (u2), 3 = s11 (u1, 01-03 → 01-04, redeemed), 4 = s14 (u1, 01-10, not redeemed)
    history = redeemed_history(tables.sessions, max_len=2)
    # s11 (collected 01-03) sees s13 (known 01-02 12:00) but not s12, redeemed yet known only on 01-05;
    # s14 sees all three, most recently known first, cut at max_len
    assert history.tolist() == [[-1, -1], [-1, -1], [-1, -1], [1, -1], [0, 3]]
    assert redeemed_history(tables.sessions, max_len=4)[4].tolist() == [0, 3, 1, -1]
    with pytest.raises(DataError, match="max_len"):
        redeemed_history(tables.sessions, max_len=0)


def random_sessions(seed: int, n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    collect = pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 60, n), unit="D")
    return pd.DataFrame({"user_id": rng.integers(0, 15, n), "collect_time": collect,
                         "outcome_time": collect + pd.to_timedelta(rng.integers(0, 10, n), unit="D"),
                         "redeemed": rng.integers(0, 2, n).astype(np.float32)})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_redeemed_history_matches_brute_force(seed):
    s = random_sessions(seed)
    history = redeemed_history(s, max_len=6)
    user, collect, outcome = s["user_id"].to_numpy(), s["collect_time"].to_numpy(), s["outcome_time"].to_numpy()
    redeemed = s["redeemed"].to_numpy() == 1
    for i in range(len(s)):
        known = np.flatnonzero((user == user[i]) & redeemed & (outcome < collect[i]))
        known = known[np.lexsort((known, collect[known], outcome[known]))][::-1][:6]
        assert history[i].tolist() == [*known.tolist(), *[-1] * (6 - len(known))]
    entries = history >= 0
    rows, slots = np.nonzero(entries)
    j = history[rows, slots]
    assert (outcome[j] < collect[rows]).all() and redeemed[j].all() and (user[j] == user[rows]).all()
    assert (entries[:, :-1] >= entries[:, 1:]).all()  # padding only at the end
    later = entries[:, 1:] & entries[:, :-1]
    assert (outcome[history[:, :-1][later]] >= outcome[history[:, 1:][later]]).all()  # most recent first


def test_poisoned_test_labels_change_no_training_history():
    world = make_world(n_users=300, n_vouchers=40, n_items=200, n_sessions=3000, seed=3)
    s = world.tables.sessions
    cuts = default_cuts(s)
    split = split_by_time(s, *cuts)
    poisoned = s.copy()
    later = np.concatenate([split.valid, split.test])
    poisoned.loc[later, "redeemed"] = 1.0 - poisoned.loc[later, "redeemed"]
    clean, dirty = redeemed_history(s), redeemed_history(poisoned)
    assert np.array_equal(clean[split.train], dirty[split.train])
    assert not np.array_equal(clean[split.test], dirty[split.test])  # the poison did reach later sessions
    assert not np.isin(clean[split.train], later).any()
    again = split_by_time(poisoned, *cuts)
    assert np.array_equal(again.train, split.train) and np.array_equal(again.test, split.test)


def test_split_by_time_boundaries_and_default_cuts():
    s = pd.DataFrame({"collect_time": pd.to_datetime(["2024-01-01", "2024-01-05", "2024-01-09", "2024-01-05",
                                                      "2024-01-09", "2024-01-02"])})
    train, valid, test = split_by_time(s, "2024-01-05", "2024-01-09")
    assert train.tolist() == [0, 5] and valid.tolist() == [1, 3] and test.tolist() == [2, 4]
    with pytest.raises(DataError, match="valid_from ≤ test_from"):
        split_by_time(s, "2024-01-09", "2024-01-05")
    times = pd.DataFrame({"collect_time": pd.Timestamp("2024-01-01") + pd.to_timedelta(np.arange(100), unit="h")})
    cuts = default_cuts(times)
    assert [len(p) for p in split_by_time(times, *cuts)] == [80, 10, 10]
    with pytest.raises(DataError, match="distinct collection times"):
        default_cuts(pd.DataFrame({"collect_time": pd.to_datetime(["2024-01-01"] * 10)}))


# ------------------------------------------------------------------------------------------------ synthetic
@pytest.fixture(scope="module")
def world():
    return make_world(n_users=1500, n_vouchers=100, n_items=600, n_sessions=15_000, seed=0)


def test_world_is_deterministic(world):
    again = make_world(n_users=1500, n_vouchers=100, n_items=600, n_sessions=15_000, seed=0)
    pd.testing.assert_frame_equal(world.tables.sessions, again.tables.sessions)
    pd.testing.assert_frame_equal(world.tables.events, again.tables.events)
    assert np.array_equal(world.truth, again.truth)
    assert np.array_equal(world.tables.sessions["session_id"], np.arange(15_000))  # truth rows = session rows
    other = make_world(n_users=1500, n_vouchers=100, n_items=600, n_sessions=15_000, seed=1)
    assert not np.array_equal(world.truth[:100], other.truth[:100])


def test_world_rejects_too_few_items():
    with pytest.raises(DataError, match="n_items must be at least 100"):
        make_world(n_items=50)


def test_world_labels_calibrated_and_truth_informative(world):
    y = world.tables.sessions["redeemed"].to_numpy()
    assert len(y) == len(world.truth) == 15_000
    assert abs(y.mean() - world.truth.mean()) < 0.015 and 0.1 < y.mean() < 0.35
    assert auc(y, world.truth) > 0.7


def test_world_history_and_pre_behaviour_carry_signal(world):
    s, e = world.tables.sessions, world.tables.events
    y = s["redeemed"].to_numpy()
    has_history = redeemed_history(s)[:, 0] >= 0
    assert y[has_history].mean() > y[~has_history].mean() + 0.05
    # pre-collection add-to-carts in the voucher's category, a feature of the target's own pre behaviour
    items = world.tables.items.set_index("item_id")["category"]
    pre = e[e["pre"] & (e["action"] == "atc")]
    scope = s["voucher_category"].to_numpy()[pre["session"].to_numpy()]
    match = (items.reindex(pre["item_id"]).to_numpy() == scope) | (scope < 0)
    share = np.bincount(pre["session"], weights=match, minlength=len(s)) / np.maximum(
        np.bincount(pre["session"], minlength=len(s)), 1)
    assert auc(y, share) > 0.58
    assert e["pre"].any() and (~e["pre"]).any()
    post = e[~e["pre"]]
    assert (post["action_time"].to_numpy() <= s["outcome_time"].to_numpy()[post["session"].to_numpy()]).all()


# ------------------------------------------------------------------------------------------------ AmExpert
def fake_amexpert(folder):
    pd.DataFrame({"id": [1, 2, 3, 4, 5, 6], "campaign_id": [8, 8, 9, 9, 10, 10],
                  "coupon_id": [100, 101, 100, 102, 101, 102], "customer_id": [1, 2, 1, 3, 1, 2],
                  "redemption_status": [1, 0, 0, 1, 1, 0]}).to_csv(folder / "train.csv", index=False)
    pd.DataFrame({"campaign_id": [10, 8, 9], "campaign_type": ["Y", "X", "Y"],
                  "start_date": ["01/03/13", "05/01/13", "10/02/13"],
                  "end_date": ["01/04/13", "01/02/13", "20/03/13"]}).to_csv(folder / "campaign_data.csv", index=False)
    pd.DataFrame({"coupon_id": [100, 100, 101, 102, 999], "item_id": [1, 2, 2, 3, 4]}).to_csv(
        folder / "coupon_item_mapping.csv", index=False)
    pd.DataFrame({"item_id": [1, 2, 3, 4], "brand": [5, 5, 6, 7],
                  "brand_type": ["Local", "Local", "Established", "Local"],
                  "category": ["Grocery", "Grocery", "Bakery", "Meat"]}).to_csv(folder / "item_data.csv", index=False)
    pd.DataFrame({"customer_id": [1, 3], "age_range": ["46-55", "70+"], "marital_status": ["Married", None],
                  "rented": [0, 1], "family_size": ["2", "5+"], "no_of_children": [None, 1],
                  "income_bracket": [4, 5]}).to_csv(folder / "customer_demographics.csv", index=False)


def test_load_amexpert_maps_to_the_contract(tmp_path):
    fake_amexpert(tmp_path)
    tables, report = load_amexpert(tmp_path)
    s = tables.sessions
    assert list(s["session_id"]) == [1, 2, 3, 4, 5, 6]  # sorted by campaign start
    assert s["collect_time"].tolist()[:3] == [pd.Timestamp("2013-01-05"), pd.Timestamp("2013-01-05"),
                                              pd.Timestamp("2013-02-10")]
    assert s["outcome_time"].iloc[2] == pd.Timestamp("2013-03-20")
    assert tables.numeric == ["coupon_log_items", "coupon_log_brands"] and "min_spend" not in s.columns
    assert len(tables.events) == 0
    assert s["income_bracket"].tolist() == ["4", "missing", "4", "5", "4", "missing"]
    assert s["no_of_children"].iloc[3] == "1" and s["marital_status"].iloc[3] == "missing"
    assert tables.item_features == ["category", "brand", "brand_type"]
    assert tables.voucher_items.values.tolist() == [[100, 1], [100, 2], [101, 2], [102, 3]]  # coupon 999 unused
    # customer 1 redeemed in campaign 8 (ended 01/02) → known when campaign 9 and 10 start
    assert redeemed_history(s, max_len=2).tolist()[2] == [0, -1]
    assert (report.rows, report.users, report.coupons, report.campaigns, report.redeemed) == (6, 3, 3, 3, 3)
    assert report.users_with_demographics == 2 and report.redemption_rate == 0.5 and report.voucher_item_pairs == 4
    assert "6 sessions" in report.summary()


def test_load_amexpert_describes_each_coupon_by_its_items(tmp_path):
    """Coupon 100 covers items 1, 2 (brand 5, Local Grocery), 101 item 2, 102 item 3 (brand 6, Established
    Bakery); coupon 999's item 4 is not used: descriptors come from a coupon's own known items only."""
    fake_amexpert(tmp_path)
    tables, _ = load_amexpert(tmp_path)
    s = tables.sessions.set_index("voucher_id")
    assert {"coupon_category", "coupon_brand_type"} <= set(tables.categorical)
    expected = {100: (np.log(3), np.log(2), "Grocery", "Local"), 101: (np.log(2), np.log(2), "Grocery", "Local"),
                102: (np.log(2), np.log(2), "Bakery", "Established")}
    for coupon, (items, brands, category, brand_type) in expected.items():
        row = s.loc[[coupon]].iloc[0]
        assert np.isclose(row["coupon_log_items"], items) and np.isclose(row["coupon_log_brands"], brands)
        assert (row["coupon_category"], row["coupon_brand_type"]) == (category, brand_type)


def test_coupon_descriptors_break_ties_and_skip_unknown_items():
    pairs = pd.DataFrame({"voucher_id": [1, 1, 1, 1, 2], "item_id": [10, 11, 12, 13, 99]})
    items = pd.DataFrame({"item_id": [10, 11, 12, 13], "brand": [1, 1, 2, 3],
                          "brand_type": ["Local", "Established", "Local", "Established"],
                          "category": ["Meat", "Bakery", "Meat", "Bakery"]})
    out = coupon_descriptors(pairs, items)
    assert list(out.index) == [1]  # coupon 2 has no known item: the loader fills "missing" / 0
    assert np.isclose(out.loc[1, "coupon_log_items"], np.log(5))
    assert np.isclose(out.loc[1, "coupon_log_brands"], np.log(4))
    assert (out.loc[1, "coupon_category"], out.loc[1, "coupon_brand_type"]) == ("Bakery", "Established")


def test_load_amexpert_errors(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_amexpert(tmp_path / "nowhere")
    fake_amexpert(tmp_path)
    (tmp_path / "item_data.csv").unlink()
    with pytest.raises(DataError, match="item_data.csv is missing"):
        load_amexpert(tmp_path)
    fake_amexpert(tmp_path)
    campaigns = pd.read_csv(tmp_path / "campaign_data.csv")
    campaigns.loc[0, "start_date"] = "2013-03-01"
    campaigns.to_csv(tmp_path / "campaign_data.csv", index=False)
    with pytest.raises(DataError, match="'start_date' has 1 dates not in dd/mm/yy form"):
        load_amexpert(tmp_path)
    fake_amexpert(tmp_path)
    campaigns = pd.read_csv(tmp_path / "campaign_data.csv")
    campaigns[campaigns["campaign_id"] != 9].to_csv(tmp_path / "campaign_data.csv", index=False)
    with pytest.raises(DataError, match="2 campaigns missing from campaign_data.csv"):
        load_amexpert(tmp_path)
    fake_amexpert(tmp_path)
    pd.read_csv(tmp_path / "train.csv").drop(columns="redemption_status").to_csv(tmp_path / "train.csv", index=False)
    with pytest.raises(DataError, match=r"needed columns \['redemption_status'\]"):
        load_amexpert(tmp_path)


@pytest.mark.parametrize("write, message", [
    (lambda path: path.write_text("id,campaign_id,coupon_id,coupon_id,redemption_status\n1,8,100,1,1\n"),
     r"train.csv: column names \['coupon_id'\] appear more than once in the header"),
    (lambda path: path.write_text("id,campaign_id,coupon_id,customer_id,redemption_status\n"),
     r"train.csv: the table has no rows"),
    (lambda path: path.write_text(""), r"train.csv: the file is empty"),
])
def test_amexpert_files_with_a_repeated_column_or_no_rows_are_refused(tmp_path, write, message):
    """AmExpert files are read like every other table: pandas would rename a repeated column to coupon_id.1, and a
    header-only train.csv used to load as zero sessions."""
    fake_amexpert(tmp_path)
    write(tmp_path / "train.csv")
    with pytest.raises(DataError, match=message) as error:
        load_amexpert(tmp_path)
    assert "\n" not in str(error.value)
