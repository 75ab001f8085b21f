import os

import numpy as np
import pandas as pd
import pytest

from promokit.data import (
    OOV,
    CategoryEncoder,
    DataError,
    FeatureSpec,
    NumericEncoder,
    TableEncoder,
    group_split,
    holdout_split,
    latest_split,
    random_split,
    read_table,
    time_split,
    write_parquet,
)


def test_read_table_reads_csv_and_parquet(tmp_path, impressions):
    impressions.to_csv(tmp_path / "t.csv", index=False)
    write_parquet(impressions, tmp_path / "t.parquet")
    pd.testing.assert_frame_equal(read_table(tmp_path / "t.csv"), read_table(tmp_path / "t.parquet"))


def test_written_files_get_the_permissions_of_a_new_file_not_the_temp_files(tmp_path, impressions):
    old = os.umask(0o022)
    try:
        path = write_parquet(impressions.head(), tmp_path / "t.parquet")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
    assert [f.name for f in tmp_path.iterdir()] == ["t.parquet"]  # no temporary file left


@pytest.mark.parametrize("content, message", [("", "empty"), ("a,b\n", "no rows")])
def test_read_table_rejects_empty_files(tmp_path, content, message):
    (tmp_path / "e.csv").write_text(content)
    with pytest.raises(DataError, match=message):
        read_table(tmp_path / "e.csv")


def test_read_table_rejects_missing_and_unknown_files(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_table(tmp_path / "absent.csv")
    (tmp_path / "t.xlsx").write_text("x")
    with pytest.raises(DataError, match="unknown table format"):
        read_table(tmp_path / "t.xlsx")


def test_spec_infers_roles_and_never_uses_labels(impressions):
    spec = FeatureSpec().resolve(impressions, ("click", "purchase"), ("daction",))
    assert spec.categorical == ["user_id", "item_id", "segment"]
    assert spec.numeric == ["price"]
    assert spec.labels == {"click": "click", "purchase": "purchase", "daction": "daction"}


def test_spec_excludes_label_listed_as_feature_with_warning(impressions):
    with pytest.warns(UserWarning, match="labels are never features"):
        spec = FeatureSpec(categorical=["user_id", "click"]).resolve(impressions, ("click", "purchase"))
    assert spec.categorical == ["user_id"]


def test_spec_names_missing_column_and_suggests(impressions):
    table = impressions.rename(columns={"purchase": "purchased"})
    with pytest.raises(DataError, match=r"'purchase'.*4000 rows; did you mean 'purchased'"):
        FeatureSpec().resolve(table, ("click", "purchase"))


def test_a_semicolon_delimited_csv_says_the_delimiter_is_probably_wrong(tmp_path, impressions):
    impressions.to_csv(tmp_path / "t.csv", sep=";", index=False)
    table = read_table(tmp_path / "t.csv")
    with pytest.raises(DataError, match=r"column 'click' \(label 'click'\) is missing from the table of 4000 rows; "
                       r"a column's name holds it among names separated by ';' \(the whole header\): the file is "
                       r"probably delimited by semicolons, not commas.*Columns present: "
                       r"\['user_id;item_id;segment;price;click;daction;purchase'\]"):
        FeatureSpec().resolve(table, ("click", "purchase"))
    impressions.to_csv(tmp_path / "t.tsv.csv", sep="\t", index=False)
    with pytest.raises(DataError, match=r"separated by '\\t' \(the whole header\): the file is probably delimited "
                                         r"by tabs"):
        FeatureSpec().resolve(read_table(tmp_path / "t.tsv.csv"), ("click", "purchase"))


@pytest.mark.parametrize("present, suggested", [
    ("price", None), ("purchse", "purchse"), ("Purchase", "Purchase"),
    ("is_purchase", "is_purchase"), ("purhcase", "purhcase"), ("purchases", "purchases"), ("pur", None),
])
def test_only_close_names_are_suggested_for_a_missing_column(impressions, present, suggested):
    table = impressions.rename(columns={"purchase": present})
    with pytest.raises(DataError) as error:
        FeatureSpec().resolve(table, ("click", "purchase"))
    mapping = f"FeatureSpec(labels={{'purchase': {suggested or '<column>'!r}}})"
    hint = (f"; did you mean {suggested!r}? If it holds the label, map it: {mapping}. Columns present" if suggested
            else f". Map the column that holds it: {mapping}. Columns present")
    assert f"column 'purchase' (label 'purchase') is missing from the table of 4000 rows{hint}" in str(error.value)


def test_types_override_the_inferred_type_and_are_kept(impressions):
    table = impressions.assign(brand=np.arange(len(impressions)) % 300, hour=np.arange(len(impressions)) % 24)
    labels = ("click", "purchase"), ("daction",)
    inferred = FeatureSpec().resolve(table, *labels)
    assert "brand" in inferred.numeric and "hour" in inferred.categorical  # 300 integers; 24
    spec = FeatureSpec(types={"brand": "categorical", "hour": "numeric"}).resolve(table, *labels)
    assert spec.categorical == ["user_id", "item_id", "segment", "brand"]
    assert spec.numeric == ["price", "hour"]
    assert spec.types == {"brand": "categorical", "hour": "numeric"}
    assert FeatureSpec.from_dict(spec.to_dict()) == spec
    written_before = {key: value for key, value in spec.to_dict().items() if key != "types"}
    assert FeatureSpec.from_dict(written_before).types == {}  # model directories from before types load
    listed = FeatureSpec(categorical=["user_id"], numeric=["price", "hour"],
                         types={"hour": "categorical", "brand": "categorical"}).resolve(table, *labels)
    assert (listed.categorical, listed.numeric) == (["user_id", "hour", "brand"], ["price"])


def test_a_mostly_numeric_text_column_given_categorical_is_no_error(impressions):
    table = impressions.assign(code=impressions["item_id"].astype(str).where(impressions.index != 7, "n/a"))
    labels = ("click", "purchase"), ("daction",)
    with pytest.raises(DataError, match=r"clean them, or make it categorical \(--categorical code, or the spec's"):
        FeatureSpec().resolve(table, *labels)
    assert "code" in FeatureSpec(types={"code": "categorical"}).resolve(table, *labels).categorical


@pytest.mark.parametrize("types, message", [
    ({"brnd": "categorical"}, r"column 'brnd' \(given the type categorical\) is missing .* did you mean 'brand'"),
    ({"click": "numeric"}, "column 'click' is given the type numeric, but it is a label, key or time column"),
    ({"brand": "text"}, "types maps columns to categorical or numeric, got {'brand': 'text'}"),
])
def test_types_name_columns_of_the_table_that_are_features(impressions, types, message):
    table = impressions.assign(brand=1)
    with pytest.raises(DataError, match=message):
        FeatureSpec(types=types).resolve(table, ("click", "purchase"))


def test_spec_maps_label_roles_to_other_columns(impressions):
    table = impressions.rename(columns={"click": "is_click"})
    spec = FeatureSpec(labels={"click": "is_click"}).resolve(table, ("click", "purchase"))
    assert spec.labels["click"] == "is_click" and "is_click" not in spec.features


def test_spec_file_round_trip(tmp_path):
    (tmp_path / "spec.yaml").write_text("categorical: [user_id]\nnumeric: [price]\nlabels: {click: c}\n")
    spec = FeatureSpec.from_file(tmp_path / "spec.yaml")
    assert spec.labels == {"click": "c"} and spec.group_key == "user_id"
    (tmp_path / "bad.yaml").write_text("categoricals: [user_id]\n")
    with pytest.raises(DataError, match="unknown keys"):
        FeatureSpec.from_file(tmp_path / "bad.yaml")


def test_category_encoder_maps_unseen_and_missing_to_oov():
    enc = CategoryEncoder.fit(pd.Series([3, 1, 3, 2]))
    assert enc.cardinality == 4
    codes = enc.transform(pd.Series([1, 2, 3, 99]))
    assert codes.tolist() == [1, 2, 3, 0]
    text = CategoryEncoder.fit(pd.Series(["a", "b", None]))
    assert text.transform(pd.Series(["b", "zzz", None])).tolist() == [2, 0, 0]
    # a JSON round trip gives the same codes
    assert CategoryEncoder.from_dict(enc.to_dict()).transform(pd.Series([2, 5])).tolist() == [2, 0]


@pytest.mark.parametrize("dtype", ["int64", "uint16", "Int64", "object", "str", "string[pyarrow]"])
def test_category_encoder_codes_whatever_the_column_dtype(dtype):
    """The fast paths (NumPy integers looked up as they are, text made canonical once per distinct value) code every
    value as the canonical one does, a missing value and a number written as text included."""
    values = pd.Series([3, 17, 5, 17, 3, 99, 3])
    column = values.astype(dtype) if dtype in ("int64", "uint16", "Int64") else values.astype(str).astype(dtype)
    if dtype not in ("int64", "uint16"):
        column.iloc[5] = None  # missing, where the dtype allows it; else 99, unseen: OOV either way
    numbers, text = CategoryEncoder([17, 3, 5], "int"), CategoryEncoder(["3", "5", "17"], "str")
    assert numbers.transform(column).tolist() == [2, 1, 3, 1, 2, 0, 2]
    assert text.transform(column).tolist() == [1, 3, 2, 3, 1, 0, 1]


def test_category_encoder_min_count_sends_rare_values_to_oov():
    enc = CategoryEncoder.fit(pd.Series(["a", "a", "b"]), min_count=2)
    assert enc.transform(pd.Series(["a", "b"])).tolist() == [1, 0]


@pytest.mark.parametrize("dtype", ["int64", "Int64", "object", "str", "category", "bool", "float64"])
@pytest.mark.parametrize("min_count", [1, 2])
def test_category_encoder_fit_transform_is_fit_on_the_rows_then_transform(dtype, min_count):
    """One factorisation serves both: the vocabulary of the rows given (counted as fit counts them, 1 and "1" one
    value) and the codes of every row, those outside the rows (7, unseen there) and the missing ones OOV."""
    values = pd.Series([3, 17, 5, 17, 3, 7, 1, 3, 1, 5])
    if dtype == "bool":
        column = values > 4
    elif dtype in ("int64", "Int64", "float64"):
        column = values.astype(dtype)
    else:
        column = values.astype(str).astype(dtype)
    if dtype == "object":
        column.iloc[8] = 1  # the number beside its text "1": one canonical value
    if dtype in ("Int64", "object", "str", "float64"):
        column.iloc[2] = None
    rows = np.array([0, 1, 2, 3, 4, 6, 7, 8, 9])
    fitted, codes = CategoryEncoder.fit_transform(column, min_count, rows)
    expected = CategoryEncoder.fit(column.iloc[rows], min_count)
    assert (fitted.kind, fitted.vocabulary) == (expected.kind, expected.vocabulary)
    assert codes.tolist() == expected.transform(column).tolist()
    if dtype == "object" and min_count == 2:
        assert "1" in fitted.vocabulary  # counted twice: "1" and 1


def test_table_encoder_fit_transform_is_fit_on_the_rows_then_transform(impressions):
    spec = FeatureSpec().resolve(impressions, ("click", "purchase"), ("daction",))
    rows = np.arange(0, len(impressions), 3)
    encoder, encoded = TableEncoder.fit_transform(impressions, spec, rows)
    expected = TableEncoder.fit(impressions.iloc[rows], spec)
    assert encoder.to_dict() == expected.to_dict()
    again = expected.transform(impressions)
    np.testing.assert_array_equal(encoded.categorical, again.categorical)
    np.testing.assert_array_equal(encoded.numeric, again.numeric)
    assert (encoded.oov_counts, encoded.missing_counts) == (again.oov_counts, again.missing_counts)


def test_numeric_encoder_is_esm2_eq17_and_flags_missing():
    series = pd.Series([1.0, 3.0, np.nan])
    enc = NumericEncoder.fit(series)
    assert enc.mean == 2.0 and enc.std == 1.0 and enc.flag_missing
    out = enc.transform(pd.Series([3.0, np.nan]))
    np.testing.assert_allclose(out, [[np.tanh(1.0), 0.0], [0.0, 1.0]], rtol=1e-6)


def test_table_encoder_rejects_text_in_numeric_column(impressions):
    table = impressions.astype({"price": object})
    table.loc[5, "price"] = "cheap"
    spec = FeatureSpec(categorical=["user_id"], numeric=["price"])
    with pytest.raises(DataError, match=r"numeric column 'price' has 1 non-numeric values in 4000 rows, e.g. row 5"):
        TableEncoder.fit(table, spec)


def test_table_encoder_round_trip_and_missing_feature(impressions):
    spec = FeatureSpec().resolve(impressions, ("click", "purchase"), ("daction",))
    enc = TableEncoder.fit(impressions, spec)
    again = TableEncoder.from_dict(enc.to_dict())
    a, b = enc.transform(impressions), again.transform(impressions)
    np.testing.assert_array_equal(a.categorical, b.categorical)
    np.testing.assert_array_equal(a.numeric, b.numeric)
    assert enc.cardinalities == [51, 31, 4]
    with pytest.raises(DataError, match=r"\['price'\] used in training are missing"):
        enc.transform(impressions.drop(columns="price"))


def test_splits_partition_rows():
    parts = random_split(100, (0.8, 0.1, 0.1), seed=1)
    assert [len(p) for p in parts] == [80, 10, 10]
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(100))
    with pytest.raises(DataError, match="sum to 1"):
        random_split(10, (0.5, 0.6))


def test_time_split_keeps_equal_times_together():
    times = pd.Series([3, 1, 2, 2, 2, 4, 5, 1, 2, 3])
    train, test = time_split(times, (0.5, 0.5))
    assert times[train].max() < times[test].min()


def test_group_split_keeps_groups_whole():
    groups = pd.Series(np.repeat(np.arange(20), 5))
    parts = group_split(groups, (0.5, 0.5), seed=0)
    assert set(groups[parts[0]]).isdisjoint(groups[parts[1]])


def test_spec_min_count_maps_rare_ids_to_the_oov_row(impressions, tmp_path):
    table = impressions.copy()
    table.loc[:2, "user_id"] = [1000, 1001, 1001]  # seen once and twice
    spec = FeatureSpec(categorical=["user_id"], min_count=2)
    codes = TableEncoder.fit(table, spec).transform(table).categorical[:3, 0]
    assert codes[0] == OOV and codes[1] == codes[2] != OOV
    (tmp_path / "spec.yaml").write_text("categorical: [user_id]\nmin_count: 3\ntime_key: price\n")
    loaded = FeatureSpec.from_file(tmp_path / "spec.yaml")
    assert (loaded.min_count, loaded.time_key) == (3, "price")
    assert TableEncoder.fit(table, loaded).transform(table).categorical[1, 0] == OOV
    for bad in (0, 2.5, "3", True):
        with pytest.raises(DataError, match="min_count must be a whole number >= 1"):
            FeatureSpec(min_count=bad)


def test_time_key_is_never_a_feature_and_must_exist(impressions):
    table = impressions.assign(day=np.arange(len(impressions)) // 1000)
    spec = FeatureSpec(time_key="day").resolve(table, ("click", "purchase"))
    assert "day" not in spec.features and spec.time_key == "day"
    with pytest.raises(DataError, match="cannot also be a feature"):
        FeatureSpec(numeric=["price", "day"], time_key="day").resolve(table, ("click", "purchase"))
    with pytest.raises(DataError, match=r"column 'dya' \(time key\) is missing .* did you mean 'day'"):
        FeatureSpec(time_key="dya").resolve(table, ("click", "purchase"))


def test_latest_split_validates_on_the_latest_rows_and_keeps_equal_times_together():
    times = pd.Series([5, 1, 3, 3, 2, 4, 4, 1, 3, 2], name="day")
    train, valid = latest_split(times, 0.2)
    assert sorted(times[valid]) == [4, 4, 5] and times[train].max() < times[valid].min()
    assert np.array_equal(np.sort(np.concatenate([train, valid])), np.arange(10))
    with pytest.raises(DataError, match="all 3 rows are at or after 7"):
        latest_split(pd.Series([7, 7, 7], name="day"), 0.2)
    with pytest.raises(DataError, match="time column 'day' has 1 missing values in 3 rows"):
        latest_split(pd.Series([1.0, None, 2.0], name="day"), 0.5)


def test_holdout_split_by_name(impressions):
    table = impressions.assign(day=np.arange(len(impressions)) // 400)
    kept, held = holdout_split(table, 0.1, "time:day")
    assert set(table["day"].iloc[held]) == {9} and len(kept) == 3600
    kept, held = holdout_split(table, 0.1, "random", seed=3)
    assert len(held) == 400 and table["day"].iloc[held].nunique() > 1
    with pytest.raises(DataError, match="column 'dy' is not in the table of 4000 rows"):
        holdout_split(table, 0.1, "time:dy")
    with pytest.raises(DataError, match="'random' or 'time:<column>'"):
        holdout_split(table, 0.1, "latest")


def test_a_repeated_column_name_is_one_line(tmp_path):
    (tmp_path / "t.csv").write_text("user_id,price,user_id\n1,2.0,3\n")
    with pytest.raises(DataError, match=r"column names \['user_id'\] appear more than once in the header of its 1 rows"):
        read_table(tmp_path / "t.csv")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table([[1], [2]], names=["a", "a"]), tmp_path / "t.parquet")
    with pytest.raises(DataError, match=r"cannot be read as parquet: [^\n]*$"):
        read_table(tmp_path / "t.parquet")
