"""load_kuairand / kuairand_spec on a tiny fake KuaiRand-Pure folder; the micro-behaviour / GMCM tests at the end
also read the shared 2,000-row smoke log (skipped when ../shared/data/kuairand_pure is absent)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from promokit.conversion.contract import check_labels
from promokit.conversion.kuairand import (
    LOG_FILE,
    MICRO_BEHAVIOURS,
    MICRO_NAMES,
    OUTCOME_COLUMNS,
    USER_FILE,
    VIDEO_FILE,
    KuaiRandReport,
    kuairand_spec,
    load_kuairand,
)
from promokit.data import DataError, TableEncoder

# One row per case: (is_click, is_like, is_comment, is_forward, is_profile_enter, is_follow)
BEHAVIOURS = [
    (1, 0, 0, 0, 0, 0),  # 0 click only
    (1, 1, 0, 0, 0, 0),  # 1 like → daction
    (1, 0, 1, 0, 0, 1),  # 2 comment + follow → daction, purchase
    (1, 0, 0, 1, 0, 0),  # 3 forward → daction
    (1, 0, 0, 0, 1, 0),  # 4 profile enter → daction
    (1, 0, 0, 0, 0, 1),  # 5 follow without daction → purchase
    (0, 0, 0, 0, 0, 0),  # 6 nothing
    (0, 1, 0, 0, 0, 0),  # 7 like without click → repaired
    (0, 1, 0, 0, 1, 1),  # 8 like + profile + follow without click → repaired (daction once, purchase once)
    (0, 0, 0, 0, 0, 0),  # 9 nothing
]
NAMES = ("is_click", "is_like", "is_comment", "is_forward", "is_profile_enter", "is_follow")


def fake_log() -> pd.DataFrame:
    n = len(BEHAVIOURS)
    flags = np.array(BEHAVIOURS)
    log = pd.DataFrame({
        "user_id": [0, 0, 1, 1, 2, 2, 3, 3, 4, 4],
        "video_id": [10, 11, 12, 10, 11, 12, 10, 13, 11, 12],
        "date": [20220425] * 4 + [20220426] * 3 + [20220427] * 3,
        "hourmin": [0, 100, 200, 300, 400, 500, 600, 700, 800, 900],
        "time_ms": np.arange(n) * 1000 + 1650812741436,
        **{name: pd.array(flags[:, j], dtype="Int64") for j, name in enumerate(NAMES)},
        "is_hate": pd.array([1, 0, 0, 0, 0, 0, 0, 0, 0, 1], dtype="Int64"),  # row 9: hate without click
        "long_view": pd.array([1, 1, 1, 0, 0, 1, 0, 0, 1, 0], dtype="Int64"),
        "play_time_ms": pd.array(np.arange(n) * 5000, dtype="Int64"),
        "duration_ms": pd.array([50_000] * n, dtype="Int64"),
        "profile_stay_time": pd.array([0] * n, dtype="Int64"),
        "comment_stay_time": pd.array([0] * n, dtype="Int64"),
        "is_rand": pd.array([0] * n, dtype="Int64"),
        "tab": pd.array([1, 1, 0, 4, 1, 1, 6, 1, 2, 1], dtype="Int64"),
        "source_file": ["log_standard_4_22_to_5_08_pure.csv"] * n,
        "watch_ratio": np.linspace(0.1, 2.0, n).astype(np.float32),
        "finish": np.int8([1, 0] * 5),
        "like": flags[:, 1].astype(np.int8),
        "long_watch": np.int8([1, 1, 0, 0, 1, 1, 0, 0, 1, 1]),
        "is_positive": np.int8([1] * n),
        "author_id": [100, 101, 102, 100, 101, 102, 100, 103, 101, 102],
        "tag": pd.array(["39", "9", "unknown", "39", "9", None, "39", "12", "9", "unknown"], dtype="string"),
        "upload_dt": pd.array(["2022-04-10"] * n, dtype="string"),
        "upload_date": pd.array([20220410] * n, dtype="Int64"),
        "video_duration": pd.array([50_000.0, None, 9000.0, 50_000.0, None, 9000.0, 50_000.0, 12_000.0, None,
                                    9000.0], dtype="Float64"),
        "freshness_days": [15, 15, 15, 15, 16, 16, 16, 17, 17, 17],
    })
    return log


def fake_users() -> pd.DataFrame:
    users = pd.DataFrame({
        "user_id": [0, 1, 2, 3, 4],
        "user_active_degree": ["full_active", "high_active", "full_active", "low_active", "full_active"],
        "is_lowactive_period": [0] * 5,
        "is_live_streamer": [-124, 1, -124, -124, 1],
        "is_video_author": [1, 0, 1, 1, 0],
        "follow_user_num": [514, 8, 40, 0, 300],
        "follow_user_num_range": ["500+", "(0,10]", "(10,50]", "0", "(250,500]"],
        "fans_user_num": [150, 20, 3, 0, 26],
        "fans_user_num_range": ["[100,1k)", "[10,100)", "[1,10)", "0", "[10,100)"],
        "friend_user_num": [34, 3, 0, 0, 3],
        "friend_user_num_range": ["[30,60)", "[1,5)", "0", "0", "[1,5)"],
        "register_days": [799, 1474, 231, 40, 900],
        "register_days_range": ["730+", "730+", "181-365", "31-60", "730+"],
    })
    for i in range(18):
        users[f"onehot_feat{i}"] = [i % 3, 1, 2, 0, 1]
    users["onehot_feat4"] = [1.0, np.nan, 2.0, 0.0, 1.0]   # float with missing, as in the real file
    users["onehot_feat12"] = [0.0, 1.0, np.nan, 1.0, 0.0]
    return users


def fake_videos() -> pd.DataFrame:
    return pd.DataFrame({
        "video_id": [10, 11, 12, 13],
        "author_id": [100, 101, 102, 103],
        "video_type": ["NORMAL", "NORMAL", "AD", "NORMAL"],
        "upload_dt": ["2022-04-10"] * 4,
        "upload_type": ["LongImport", "Web", "Kmovie", "ShortImport"],
        "visible_status": [0.0] * 4,
        "video_duration": [50_000.0, np.nan, 9000.0, 12_000.0],
        "server_width": [720.0, 1280.0, 720.0, np.nan],
        "server_height": [1280.0, 720.0, 720.0, np.nan],
        "music_id": [9155697141, 6355810746, 6618412736, 1],
        "music_type": [9.0, np.nan, 4.0, 9.0],
        "tag": ["39", None, "9", "12"],
    })


def write_folder(path, log=None, users=None, videos=None):
    path.mkdir(parents=True, exist_ok=True)
    (fake_log() if log is None else log).to_parquet(path / LOG_FILE, index=False)
    (fake_users() if users is None else users).to_csv(path / USER_FILE, index=False)
    (fake_videos() if videos is None else videos).to_csv(path / VIDEO_FILE, index=False)
    return path


@pytest.fixture
def folder(tmp_path):
    return write_folder(tmp_path / "kuairand_pure")


def test_labels_map_click_daction_or_and_follow(folder):
    table, report = load_kuairand(folder)
    assert table["click"].tolist() == [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]
    assert table["daction"].tolist() == [0, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    assert table["purchase"].tolist() == [0, 0, 1, 0, 0, 1, 0, 0, 0, 0]
    assert (report.rows, report.clicks, report.dactions, report.purchases) == (10, 6, 4, 2)
    assert report.purchases_after_daction == 1
    assert report.dates == (20220425, 20220426, 20220427)
    assert (report.users, report.items) == (5, 4)
    # the result satisfies the conversion contract without any further repair
    _, label_report = check_labels(table, {r: r for r in ("click", "daction", "purchase")})
    assert label_report.repaired == {}


def test_daction_behaviours_are_configurable(folder):
    table, _ = load_kuairand(folder, daction=("is_like",), purchase="is_comment")
    assert table["daction"].tolist() == [0, 1, 0, 0, 0, 0, 0, 0, 0, 0]
    assert table["purchase"].tolist() == [0, 0, 1, 0, 0, 0, 0, 0, 0, 0]


def test_nesting_repair_is_counted(folder):
    _, report = load_kuairand(folder, micro=None)
    assert report.repaired == {"daction": 2, "purchase": 1}
    assert report.unclicked_behaviours == {"is_like": 2, "is_comment": 0, "is_forward": 0,
                                           "is_profile_enter": 1, "is_follow": 1}
    assert "daction 2, purchase 1 [" in report.summary()
    assert "micro" not in report.summary() and report.micro_behaviours == {}
    with pytest.raises(AttributeError):  # frozen
        report.rows = 0
    assert isinstance(report, KuaiRandReport)


def test_no_outcome_column_leaks_into_table_or_spec(folder):
    table, _ = load_kuairand(folder, micro=None)
    spec = kuairand_spec(table)
    assert not OUTCOME_COLUMNS & set(table.columns)
    assert not [c for c in table.columns if c.startswith("is_")]
    for leak in ("play_time_ms", "watch_ratio", "long_view", "duration_ms", "time_ms", "upload_date", "music_id"):
        assert leak not in table.columns
    assert not {"click", "daction", "purchase", "date"} & set(spec.features)
    assert set(spec.features) <= set(table.columns)
    assert spec.numeric == ["video_duration", "freshness_days"]
    assert {"user_id", "item_id", "author_id", "tab", "hourmin", "tag", "user_active_degree", "upload_type",
            "orientation", "onehot_feat4"} <= set(spec.categorical)
    assert spec.labels == {"click": "click", "daction": "daction", "purchase": "purchase"}
    assert spec.group_key == "user_id"
    resolved = spec.resolve(table, ("click", "purchase"), ("daction",))
    encoder = TableEncoder.fit(table, resolved)
    assert encoder.transform(table).categorical.shape == (10, len(spec.categorical))
    assert "user_id" not in kuairand_spec(table, ids=False).features


def test_side_features_are_joined_and_cleaned(folder):
    table, report = load_kuairand(folder)
    assert table["item_id"].tolist() == fake_log()["video_id"].tolist()
    assert table.loc[0, "follow_user_num_range"] == "500+"
    assert table.loc[2, "user_live_streamer"] == 1 and table.loc[0, "user_live_streamer"] == -124
    assert table.loc[2, "onehot_feat4"] == -1          # NaN in a float-coded category → −1
    assert table["onehot_feat4"].dtype == np.int64
    assert table.loc[1, "music_type"] == -1
    assert table.loc[0, "orientation"] == "portrait" and table.loc[1, "orientation"] == "landscape"
    assert table.loc[2, "orientation"] == "square" and table.loc[7, "orientation"] == "unknown"
    assert table.loc[5, "tag"] == "unknown"
    assert np.isnan(table.loc[1, "video_duration"])
    assert report.missing_side_features == {"user": 0, "video": 0}
    assert list(table.columns[-9:]) == ["click", "daction", "purchase", *MICRO_NAMES]


def test_without_side_features(tmp_path):
    folder = tmp_path / "only_log"
    folder.mkdir()
    fake_log().to_parquet(folder / LOG_FILE, index=False)
    table, report = load_kuairand(folder, side_features=False)
    assert list(table.columns) == ["user_id", "item_id", "author_id", "tab", "date", "hourmin", "tag",
                                   "video_duration", "freshness_days", "click", "daction", "purchase", *MICRO_NAMES]
    assert report.missing_side_features == {}
    assert "user_active_degree" not in kuairand_spec(table).features


def test_ids_missing_from_side_tables_are_counted(tmp_path):
    folder = write_folder(tmp_path / "k", users=fake_users().iloc[:4])  # user 4 has no row
    table, report = load_kuairand(folder)
    assert report.missing_side_features["user"] == 2
    assert table.loc[8, "user_active_degree"] == "missing" and table.loc[8, "onehot_feat0"] == -1


def test_missing_folder_log_and_side_file(tmp_path, folder):
    with pytest.raises(DataError, match="does not exist"):
        load_kuairand(tmp_path / "nowhere")
    with pytest.raises(DataError, match="other.parquet is missing"):
        load_kuairand(folder, log="other.parquet")
    (folder / VIDEO_FILE).unlink()
    with pytest.raises(DataError, match="video features file .* is missing"):
        load_kuairand(folder)
    assert load_kuairand(folder, side_features=False)[1].rows == 10


def test_missing_columns_are_named(tmp_path):
    folder = write_folder(tmp_path / "a", log=fake_log().drop(columns=["is_follow", "tab"]))
    with pytest.raises(DataError, match=r"\['tab', 'is_follow'\] are missing"):
        load_kuairand(folder)
    folder = write_folder(tmp_path / "b", users=fake_users().drop(columns=["user_active_degree"]))
    with pytest.raises(DataError, match="user_active_degree"):
        load_kuairand(folder)
    with pytest.raises(DataError, match="is_share"):
        load_kuairand(folder, daction=("is_like", "is_share"), side_features=False)


def test_bad_label_values_and_duplicate_ids(tmp_path):
    log = fake_log()
    log.loc[3, "is_like"] = 2
    with pytest.raises(DataError, match="'is_like' must be 0/1"):
        load_kuairand(write_folder(tmp_path / "a", log=log))
    log = fake_log()
    log.loc[0, "is_click"] = pd.NA
    with pytest.raises(DataError, match="'is_click' must be 0/1 but has 1 missing"):
        load_kuairand(write_folder(tmp_path / "b", log=log))
    videos = pd.concat([fake_videos(), fake_videos().iloc[:1]])
    with pytest.raises(DataError, match="duplicate video_id"):
        load_kuairand(write_folder(tmp_path / "c", videos=videos))


def test_cli_writes_table_spec_and_report(tmp_path, folder):
    from typer.testing import CliRunner

    from promokit.cli import app
    from promokit.data import FeatureSpec, read_table

    out = tmp_path / "kuairand.parquet"
    result = CliRunner().invoke(app, ["conversion", "kuairand", "--src", str(folder), "--out", str(out), "--no-ids"])
    assert result.exit_code == 0, result.output
    table = read_table(out)
    spec = FeatureSpec.from_file(out.with_suffix(".spec.yaml"))
    assert spec.labels == {"click": "click", "daction": "daction", "purchase": "purchase"}
    assert spec.micro_behaviors == list(MICRO_NAMES) and not set(MICRO_NAMES) & set(spec.features)
    assert list(table.columns[-6:]) == list(MICRO_NAMES)
    assert "user_id" not in spec.categorical and "video_duration" in spec.numeric
    assert spec.resolve(table, ("click", "purchase"), ("daction",)).features == spec.features
    assert '"repaired"' in out.with_suffix(".json").read_text()

    missing = CliRunner().invoke(app, ["conversion", "kuairand", "--src", str(tmp_path / "nowhere"), "--out", str(out)])
    assert missing.exit_code == 2 and "does not exist" in missing.output

    chosen = tmp_path / "chosen.parquet"
    result = CliRunner().invoke(app, ["conversion", "kuairand", "--src", str(folder), "--out", str(chosen),
                                      "--micro-behaviors", "is_like, finish"])
    assert result.exit_code == 0, result.output
    assert FeatureSpec.from_file(chosen.with_suffix(".spec.yaml")).micro_behaviors == ["like", "finish"]
    none = tmp_path / "none.parquet"
    assert CliRunner().invoke(app, ["conversion", "kuairand", "--src", str(folder), "--out", str(none),
                                    "--micro-behaviors", "none"]).exit_code == 0
    assert FeatureSpec.from_file(none.with_suffix(".spec.yaml")).micro_behaviors == []
    assert list(read_table(none).columns[-3:]) == ["click", "daction", "purchase"]
    clash = CliRunner().invoke(app, ["conversion", "kuairand", "--src", str(folder), "--out", str(none),
                                     "--micro-behaviors", "is_follow"])
    assert clash.exit_code == 2 and "is the purchase" in clash.output


# ------------------------------------------------------------------------------------------ micro-behaviours
def test_micro_behaviours_are_post_click_labels(folder):
    table, report = load_kuairand(folder)
    assert MICRO_NAMES == ("like", "comment", "forward", "profile_enter", "long_view", "hate")
    assert table["like"].tolist() == [0, 1, 0, 0, 0, 0, 0, 0, 0, 0]           # rows 7, 8 unclicked → 0
    assert table["comment"].tolist() == [0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
    assert table["forward"].tolist() == [0, 0, 0, 1, 0, 0, 0, 0, 0, 0]
    assert table["profile_enter"].tolist() == [0, 0, 0, 0, 1, 0, 0, 0, 0, 0]  # row 8 unclicked → 0
    assert table["long_view"].tolist() == [1, 1, 1, 0, 0, 1, 0, 0, 0, 0]      # row 8 unclicked → 0
    assert table["hate"].tolist() == [1, 0, 0, 0, 0, 0, 0, 0, 0, 0]           # row 9 unclicked → 0
    for name in MICRO_NAMES:
        assert table[name].dtype == np.int8
        assert (table.loc[table["click"] == 0, name] == 0).all()
    assert report.micro_behaviours == dict(zip(MICRO_NAMES, MICRO_BEHAVIOURS))
    assert report.micro_counts == {"like": 1, "comment": 1, "forward": 1, "profile_enter": 1, "long_view": 4,
                                   "hate": 1}
    assert report.repaired == {"daction": 2, "purchase": 1, "like": 2, "comment": 0, "forward": 0,
                               "profile_enter": 1, "long_view": 1, "hate": 1}
    assert report.unclicked_behaviours["long_view"] == 1 and report.unclicked_behaviours["is_hate"] == 1
    assert "like 2, comment 0, forward 0, profile_enter 1, long_view 1, hate 1 [" in report.summary()
    assert "micro-behaviours (labels, 1 only after a click): like 1, comment 1" in report.summary()
    # the conversion contract checks them as post-click labels: nothing left to repair
    from promokit.conversion.contract import LabelReport, check_micro_behaviors
    label_report = LabelReport()
    check_micro_behaviors(table, list(MICRO_NAMES), table["click"].to_numpy(), "click", False, label_report)
    assert label_report.repaired == {}


def test_micro_behaviours_leave_the_other_columns_unchanged(folder):
    without, report_without = load_kuairand(folder, micro=None)
    with_micro, report = load_kuairand(folder)
    assert list(with_micro.columns) == [*without.columns, *MICRO_NAMES]
    pd.testing.assert_frame_equal(with_micro[list(without.columns)], without)
    assert load_kuairand(folder, micro=())[0].equals(without)
    for field in ("rows", "clicks", "dactions", "purchases", "purchases_after_daction"):
        assert getattr(report, field) == getattr(report_without, field)
    assert {k: report.repaired[k] for k in ("daction", "purchase")} == report_without.repaired
    assert report.summary().startswith(report_without.summary().split(" Nesting repair")[0])


def test_spec_lists_micro_behaviours_never_as_features(folder):
    table, _ = load_kuairand(folder)
    spec = kuairand_spec(table)
    assert spec.micro_behaviors == list(MICRO_NAMES)
    assert not set(MICRO_NAMES) & set(spec.features)
    assert not OUTCOME_COLUMNS & set(spec.features)
    assert set(table.columns) & OUTCOME_COLUMNS == {"like", "long_view"}  # only as the micro-behaviour labels
    resolved = spec.resolve(table, ("click", "purchase"), ("daction",))
    assert resolved.micro_behaviors == list(MICRO_NAMES) and resolved.features == spec.features
    assert kuairand_spec(table, micro_behaviors=["like"]).micro_behaviors == ["like"]
    assert kuairand_spec(table, micro_behaviors=[]).micro_behaviors == []
    assert kuairand_spec(load_kuairand(folder, micro=None)[0]).micro_behaviors == []
    with pytest.raises(DataError, match=r"\['tag'\] are features"):
        kuairand_spec(table, micro_behaviors=["like", "tag"])
    with pytest.raises(DataError, match="missing"):
        kuairand_spec(table, micro_behaviors=["share"])


def test_micro_behaviours_are_configurable(folder):
    table, report = load_kuairand(folder, micro=("is_like", "finish"), side_features=False)
    assert list(table.columns[-5:]) == ["click", "daction", "purchase", "like", "finish"]
    assert table["finish"].tolist() == [1, 0, 1, 0, 1, 0, 0, 0, 0, 0]      # the log's finish, 0 without a click
    assert report.repaired["finish"] == 2 and kuairand_spec(table).micro_behaviors == ["like", "finish"]
    # the default leaves out the purchase behaviour when it is one of them
    table, report = load_kuairand(folder, purchase="is_like", daction=("is_comment",))
    assert "like" not in table.columns and list(report.micro_behaviours) == [n for n in MICRO_NAMES if n != "like"]
    assert table["purchase"].tolist() == [0, 1, 0, 0, 0, 0, 0, 0, 0, 0]


def test_bad_micro_behaviours_are_refused(folder):
    with pytest.raises(DataError, match="'is_follow' is the purchase"):
        load_kuairand(folder, micro=("is_like", "is_follow"))
    with pytest.raises(DataError, match="'is_click' is the click"):
        load_kuairand(folder, micro=("is_click",))
    with pytest.raises(DataError, match="more than once"):
        load_kuairand(folder, micro=("is_like", "is_like"))
    with pytest.raises(DataError, match="repeat or clash"):
        load_kuairand(folder, micro=("is_like", "like"))
    with pytest.raises(DataError, match="clash"):
        load_kuairand(folder, micro=("tab",))
    with pytest.raises(DataError, match="not the string"):
        load_kuairand(folder, micro="is_like")
    with pytest.raises(DataError, match=r"\['is_share'\] are missing"):
        load_kuairand(folder, micro=("is_like", "is_share"), side_features=False)
    log = fake_log()
    log.loc[2, "long_view"] = pd.NA
    with pytest.raises(DataError, match="'long_view' must be 0/1 but has 1 missing"):
        load_kuairand(write_folder(folder.parent / "bad", log=log))


# ------------------------------------------------------------------------------------- the shared smoke log
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "kuairand_pure"
SMOKE = "kuairand_pure_smoke_2000.parquet"
needs_smoke = pytest.mark.skipif(not (SHARED / SMOKE).is_file(), reason=f"no {SHARED / SMOKE}")


@pytest.fixture(scope="module")
def smoke():
    table, report = load_kuairand(SHARED, log=SMOKE)
    return table, report, kuairand_spec(table)


@needs_smoke
def test_smoke_log_micro_behaviours(smoke):
    table, report, spec = smoke
    raw = pd.read_parquet(SHARED / SMOKE)
    assert len(table) == len(raw) == 2000
    assert list(table.columns[-6:]) == list(MICRO_NAMES)
    clicked = raw["is_click"].to_numpy() == 1
    for name, source in zip(MICRO_NAMES, MICRO_BEHAVIOURS):
        assert set(np.unique(table[name])) <= {0, 1}
        assert (table.loc[table["click"] == 0, name] == 0).all()
        expected = (raw[source].to_numpy() == 1) & clicked
        assert np.array_equal(table[name].to_numpy() == 1, expected), name
        assert report.repaired[name] == int(((raw[source].to_numpy() == 1) & ~clicked).sum())
    assert spec.micro_behaviors == list(MICRO_NAMES)
    assert not set(MICRO_NAMES) & set(spec.features) and not OUTCOME_COLUMNS & set(spec.features)
    assert table["long_view"].sum() > 0 and table["like"].sum() > 0


@needs_smoke
def test_gmcm_fits_the_smoke_table(smoke):
    from promokit.conversion import ConversionModel
    from promokit.training import TrainConfig

    table, _, spec = smoke
    # none in 2,000 rows; fit holds out the latest day (the spec's time_key) and validates on the day before
    with pytest.warns(UserWarning, match=r"label 'forward' is 0 on all \d+ clicked training rows"):
        model = ConversionModel("gmcm", spec=spec, train=TrainConfig(epochs=1, batch_size=256, progress=False))
        model.fit(table)
    assert model.net_.nodes == list(MICRO_NAMES) and model.pmg_.shape == (6, 6)
    predictions = model.predict(table, keep=[])
    assert [f"p_node_{name}" for name in MICRO_NAMES] == [c for c in predictions.columns if c.startswith("p_node_")]
    assert {"p_ctr", "p_cvr", "p_ctcvr"} <= set(predictions.columns)
    values = predictions.to_numpy()
    assert np.isfinite(values).all() and ((values >= 0) & (values <= 1)).all()
    assert "node_auc_like" in model.evaluate(table)
