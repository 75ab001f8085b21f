"""Tables in parts at a URI: an S3-compatible server (moto) started locally, credentials from the environment."""

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from promokit.data.errors import DataError
from promokit.data.io import read_table, write_part
from promokit.data.parts import is_partitioned, list_parts, parquet_rows
from promokit.data.uris import SUCCESS, as_path, begin_parts, finish_parts

pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")


def _table(rows: int = 10) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"user_id": np.arange(rows), "score": rng.random(rows).round(6),
                         "segment": [f"s{i % 3}" for i in range(rows)]})


def _write_parts(frame: pd.DataFrame, directory, parts: int) -> list[pd.DataFrame]:
    bounds = np.linspace(0, len(frame), parts + 1).round().astype(int)
    pieces = [frame.iloc[a:b] for a, b in itertools.pairwise(bounds)]
    for k, piece in enumerate(pieces):
        write_part(piece, directory, k)
    return pieces


def test_parts_round_trip_on_s3_equals_the_local_one(bucket, tmp_path):
    frame = _table()
    begin_parts(f"{bucket}/scores")
    pieces = _write_parts(frame, f"{bucket}/scores", 3)
    finish_parts(f"{bucket}/scores", [f"part-{k:05d}.parquet" for k in range(3)], [len(p) for p in pieces])
    _write_parts(frame, tmp_path / "scores", 3)
    assert is_partitioned(f"{bucket}/scores/")
    assert [p.name for p in list_parts(f"{bucket}/scores/")] == [p.name for p in list_parts(tmp_path / "scores")]
    assert parquet_rows(f"{bucket}/scores/part-00001.parquet") == len(pieces[1])
    pd.testing.assert_frame_equal(read_table(f"{bucket}/scores"), read_table(tmp_path / "scores"))
    pd.testing.assert_frame_equal(read_table(f"{bucket}/scores"), frame)
    glob = list_parts(f"{bucket}/scores/part-0000[02].parquet")
    assert [p.name for p in glob] == ["part-00000.parquet", "part-00002.parquet"]


def test_a_directory_without_markers_reads_every_part_and_a_single_file_reads_too(bucket):
    frame = _table(6)
    _write_parts(frame, f"{bucket}/plain", 2)
    write_part(frame, f"{bucket}/plain/_temporary", 0)  # skipped, as locally
    pd.testing.assert_frame_equal(read_table(f"{bucket}/plain"), frame)
    boto3.client("s3").put_object(Bucket=bucket[5:], Key=f"plain/{SUCCESS}", Body=b"")  # Spark's empty marker
    pd.testing.assert_frame_equal(read_table(f"{bucket}/plain"), frame)
    pd.testing.assert_frame_equal(read_table(f"{bucket}/plain/part-00000.parquet"), frame.iloc[:3])


def test_the_success_manifest_decides_which_parts_are_read(bucket):
    frame = _table(9)
    directory = f"{bucket}/scores"
    _write_parts(frame, directory, 3)  # an earlier run with three parts
    begin_parts(directory)
    with pytest.raises(DataError, match=r"^s3://promokit-\d+/scores: an unfinished write \(_INCOMPLETE and no "):
        read_table(directory)
    pieces = _write_parts(frame, directory, 2)
    finish_parts(directory, ["part-00000.parquet", "part-00001.parquet"], [len(p) for p in pieces])
    pd.testing.assert_frame_equal(read_table(directory), frame)  # the stale third part is not read
    boto3.client("s3").delete_object(Bucket=bucket[5:], Key="scores/part-00001.parquet")
    with pytest.raises(DataError) as lost:
        read_table(directory)
    assert str(lost.value) == (f"{directory}/part-00001.parquet: listed in {directory}/{SUCCESS} but missing (1 of 2 "
                               f"parts missing)")
    manifest = json.loads(boto3.client("s3").get_object(Bucket=bucket[5:], Key=f"scores/{SUCCESS}")["Body"].read())
    assert manifest == {"parts": ["part-00000.parquet", "part-00001.parquet"], "rows": [4, 5]}


def test_missing_bucket_key_and_unknown_scheme_are_one_line_errors(bucket):
    with pytest.raises(DataError) as missing_key:
        read_table(f"{bucket}/nothing/here.parquet")
    assert str(missing_key.value) == f"{bucket}/nothing/here.parquet: no such file"
    with pytest.raises(DataError) as missing_bucket:
        read_table("s3://no-such-bucket-here/scores/")
    assert str(missing_bucket.value) == "s3://no-such-bucket-here/scores: no such file"
    with pytest.raises(DataError) as unknown:
        read_table("ftp://host/scores/")
    assert str(unknown.value) == ("ftp://host/scores/: unknown storage scheme 'ftp'; give a local path or a URI "
                                  "starting s3://, gs://, abfs:// or hdfs://")
    for error in (missing_key, missing_bucket, unknown):
        assert "\n" not in str(error.value) and "testing-secret" not in str(error.value)


def test_a_path_made_from_a_uri_is_still_the_uri():
    from pathlib import Path

    assert str(as_path(Path("s3://bucket/scores/part-00000.parquet"))) == "s3://bucket/scores/part-00000.parquet"
    assert as_path(Path("C:/data")) == Path("C:/data")


# ------------------------------------------------------------------------------------ commands that take parts


def _invoke(*args):
    from typer.testing import CliRunner

    from promokit.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def _budget_scores(users: int = 300) -> pd.DataFrame:
    from promokit.allocation.tables import LEVEL, score_frame

    rng = np.random.default_rng(3)
    levels = [1.0, 2.0, 4.0]
    scores = np.sort(rng.random((users, len(levels))) * 0.3, axis=1)
    return score_frame(np.arange(users), levels, {"score": scores}, LEVEL)


def test_allocate_budget_reads_scores_in_parts_on_s3_as_it_reads_them_locally(bucket, tmp_path):
    scores = _budget_scores()
    _write_parts(scores, f"{bucket}/scores", 3)
    _write_parts(scores, tmp_path / "scores", 3)
    local = _invoke("allocate", "budget", "--scores", tmp_path / "scores", "--ratio", 2, "--out", tmp_path / "local")
    remote = _invoke("allocate", "budget", "--scores", f"{bucket}/scores/", "--ratio", 2, "--out", tmp_path / "s3")
    assert local.exit_code == 0 and remote.exit_code == 0, local.output + remote.output
    one, other = (json.loads((tmp_path / name / "report.json").read_text()) for name in ("local", "s3"))
    for field in ("lam", "objective", "expected_responses", "expected_spend", "parts"):
        assert other[field] == one[field], field
    plans = [read_table(tmp_path / name / "plan") for name in ("local", "s3")]
    pd.testing.assert_frame_equal(plans[1], plans[0])
    missing = _invoke("allocate", "budget", "--scores", f"{bucket}/nowhere/", "--ratio", 2, "--out", tmp_path / "x")
    assert missing.exit_code == 2 and f"{bucket}/nowhere: no such file" in missing.output, missing.output
    unknown = _invoke("allocate", "budget", "--scores", "ftp://host/scores/", "--ratio", 2, "--out", tmp_path / "y")
    assert unknown.exit_code == 2 and "ftp://host/scores: unknown storage scheme 'ftp'" in unknown.output
    assert "Traceback" not in missing.output + unknown.output and not (tmp_path / "y").exists()


def test_conversion_train_and_predict_over_parts_on_s3_equal_the_local_ones(bucket, tmp_path):
    from conftest import make_impressions

    table = make_impressions()
    _write_parts(table, f"{bucket}/impressions", 3)
    _write_parts(table, tmp_path / "impressions", 3)
    runs = {"local": (tmp_path / "impressions", tmp_path / "out"), "s3": (f"{bucket}/impressions", f"{bucket}/out")}
    for name, (data, out) in runs.items():
        trained = _invoke("conversion", "train", "--model", "esm2", "--data", data, "--out", tmp_path / f"model-{name}",
                          "--epochs", 1, "--seed", 0)
        scored = _invoke("conversion", "predict", "--model", tmp_path / f"model-{name}", "--data", data, "--out", out)
        assert trained.exit_code == 0 and scored.exit_code == 0, trained.output + scored.output
    assert f"{bucket}/out/predictions" in scored.output
    pd.testing.assert_frame_equal(read_table(f"{bucket}/out/predictions"), read_table(tmp_path / "out/predictions"))
    assert [p.name for p in list_parts(f"{bucket}/out/predictions")] == [f"part-{k:05d}.parquet" for k in range(3)]
    summary = json.loads(boto3.client("s3").get_object(Bucket=bucket[5:], Key="out/summary.json")["Body"].read())
    assert summary["rows"] == len(table) and summary["parts"] == 3
