import numpy as np
import pandas as pd
import pytest

from promokit.data import DataError, last_events_before


def brute_force(event_keys, event_times, target_keys, target_times, max_len):
    """The rule read literally: same key, event time strictly before the target's, most recent by (time, position)."""
    event_keys, target_keys = list(event_keys), list(target_keys)
    event_times, target_times = pd.Series(event_times), pd.Series(target_times)
    out = []
    for key, time in zip(target_keys, target_times):
        known = [] if pd.isna(key) or pd.isna(time) else [
            j for j, (k, t) in enumerate(zip(event_keys, event_times))
            if not pd.isna(k) and k == key and not pd.isna(t) and t < time]
        known.sort(key=lambda j: (event_times[j], j), reverse=True)
        known = known[:max_len]
        out.append(known + [-1] * (max_len - len(known)))
    return np.array(out, dtype=np.int64).reshape(len(target_keys), max_len)


def hand_case():
    events = pd.DataFrame({
        "key": ["u1", "u2", "u1", "u1", "u1", "u1", "u3", None],
        "time": pd.to_datetime(["2024-01-01 10:00", "2024-01-01 09:00", "2024-01-02 08:00", "2024-01-02 08:00",
                                "2024-01-03 12:00", None, "2024-01-05 00:00", "2024-01-01 00:00"]),
    }, index=[10, 11, 12, 13, 14, 15, 16, 17])  # labels are not positions: results must be positions
    targets = pd.DataFrame({
        "key": ["u1", "u1", "u2", "u2", "u4", "u1", None, "u1"],
        "time": pd.to_datetime(["2024-01-03 12:00", "2024-01-04 00:00", "2024-01-01 09:00", "2024-01-02 00:00", "2024-02-01 00:00",
                                None, "2024-02-01 00:00", "2024-01-02 08:00"]),
    })
    return events, targets


def test_hand_case_strings_and_datetimes():
    events, targets = hand_case()
    history = last_events_before(events["key"], events["time"], targets["key"], targets["time"], max_len=3)
    assert history.dtype == np.int64 and history.shape == (8, 3)
    assert history.tolist() == [
        [3, 2, 0],     # event 4 is exactly at the target's time: excluded; 2 and 3 tie, the later position first
        [4, 3, 2],     # cut at max_len, the most recent kept
        [-1, -1, -1],  # u2's only event is exactly at this time
        [1, -1, -1],
        [-1, -1, -1],  # u4 has no events
        [-1, -1, -1],  # missing target time
        [-1, -1, -1],  # missing target key
        [0, -1, -1],   # both events at 01-02 08:00 are at the target's own time
    ]
    assert last_events_before(events["key"], events["time"], targets["key"], targets["time"], 1)[:, 0].tolist() \
        == [3, 4, -1, 1, -1, -1, -1, 0]
    assert last_events_before(events["key"], events["time"], targets["key"], targets["time"], 6)[1].tolist() \
        == [4, 3, 2, 0, -1, -1]
    # plain lists and numpy arrays give the same answer
    same = last_events_before(list(events["key"]), events["time"].to_numpy(), targets["key"].to_numpy(),
                              list(targets["time"]), max_len=3)
    assert np.array_equal(same, history)


def test_event_order_sets_tie_breaking():
    keys, times = ["a", "a", "a"], pd.to_datetime(["2024-01-01"] * 3)
    target = pd.to_datetime(["2024-01-02"])
    assert last_events_before(keys, times, ["a"], target, 3).tolist() == [[2, 1, 0]]
    assert last_events_before(keys[:2], times[:2], ["a"], target, 1).tolist() == [[1]]


def test_numeric_times_and_keys():
    history = last_events_before([1, 1, 2, 1, 2], [1, 2, 2, 3, 5], [1, 1, 2, 1, 2, "1"],
                                 [2.0, 3.5, 2.5, np.nan, 5.0, 9.0], max_len=2)
    assert history.tolist() == [[0, -1], [3, 1], [2, -1], [-1, -1], [2, -1], [-1, -1]]  # "1" is not 1
    # float event times with NaN, int target times
    history = last_events_before(["x", "x", "x"], np.array([0.5, np.nan, 1.5]), ["x"], np.array([2]), 3)
    assert history.tolist() == [[2, 0, -1]]


def test_missing_times_and_time_zones():
    events = pd.Series(pd.to_datetime(["2024-01-01 00:00", None, "2024-01-01 02:00"]))
    assert last_events_before([1, 1, 1], events, [1, 1], pd.Series([pd.NaT, pd.Timestamp("2024-01-02")]),
                              3).tolist() == [[-1, -1, -1], [2, 0, -1]]
    # all events missing, or no targets
    assert last_events_before([1], [pd.NaT], [1], [pd.Timestamp("2024-01-02")], 2).tolist() == [[-1, -1]]
    assert last_events_before([1], events[:1], [], pd.to_datetime([]), 2).shape == (0, 2)
    # tz-aware times compare in UTC: 03:30+02:00 is 01:30 UTC, after 00:00 but before 02:00
    aware = pd.Series(pd.to_datetime(["2024-01-01 03:30"]).tz_localize("Etc/GMT-2"))
    assert last_events_before([1, 1, 1], events, [1], aware, 3).tolist() == [[0, -1, -1]]


@pytest.mark.parametrize("seed", range(5))
def test_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n_events, n_targets = 300, 200
    pool = np.array(["a", "b", "c", 3, 4, None], dtype=object)
    event_keys, target_keys = rng.choice(pool, n_events), rng.choice(pool, n_targets)
    day = pd.Timestamp("2024-01-01")
    event_times = pd.Series(day + pd.to_timedelta(rng.integers(0, 15, n_events), unit="D"))
    target_times = pd.Series(day + pd.to_timedelta(rng.integers(0, 15, n_targets), unit="D"))
    event_times[rng.random(n_events) < 0.05] = pd.NaT
    target_times[rng.random(n_targets) < 0.05] = pd.NaT
    for max_len in (1, 3, 8):
        history = last_events_before(event_keys, event_times, target_keys, target_times, max_len)
        assert np.array_equal(history, brute_force(event_keys, event_times, target_keys, target_times, max_len))
    # numeric times with ties and NaN, int event keys against the same ints as targets
    event_num = rng.integers(0, 10, n_events).astype(float)
    event_num[rng.random(n_events) < 0.05] = np.nan
    target_num = rng.integers(0, 12, n_targets)
    event_ids, target_ids = rng.integers(0, 8, n_events), rng.integers(0, 10, n_targets)
    history = last_events_before(event_ids, event_num, target_ids, target_num, 5)
    assert np.array_equal(history, brute_force(event_ids, event_num, target_ids, target_num, 5))


def test_errors():
    events, targets = hand_case()
    for bad in (0, -1):
        with pytest.raises(DataError, match="max_len"):
            last_events_before(events["key"], events["time"], targets["key"], targets["time"], bad)
    with pytest.raises(DataError, match="max_len"):
        last_events_before(events["key"], events["time"], targets["key"], targets["time"], 2.5)
    with pytest.raises(DataError, match="datetimes or both numbers"):
        last_events_before(events["key"], events["time"], targets["key"], np.arange(len(targets)), 2)
    with pytest.raises(DataError, match="datetimes or both numbers"):
        last_events_before([1, 2], [1.0, 2.0], [1], pd.to_datetime(["2024-01-01"]), 2)
    with pytest.raises(DataError, match="same length"):
        last_events_before(events["key"], events["time"][:-1], targets["key"], targets["time"], 2)
    with pytest.raises(DataError, match="datetimes or numbers"):
        last_events_before([1], ["2024-01-01"], [1], ["2024-01-02"], 2)
