"""promokit.data.parts: every table a command reads may be a directory or glob of Parquet parts (read_table reads
them into one frame), and a command reading a table whole, such as ``campaign build``, takes parts."""

import json
import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from conftest import write_parts
from promokit.campaign.directory import load_campaign
from promokit.cli import app
from promokit.data import DataError, read_table
from promokit.data.io import write_part

runner = CliRunner()


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def table():
    return pd.DataFrame({"user_id": range(10), "score": [i / 10 for i in range(10)], "name": list("abcdefghij")})


def test_a_directory_is_read_recursively_in_path_order_skipping_hidden_and_underscore_names(tmp_path, table):
    for name, rows in (("b/part-1.parquet", slice(4, 10)), ("a=1/part-0.parquet", slice(0, 4)),
                       ("_temporary/0/part-9.parquet", slice(0, 2)), (".part-2.parquet", slice(0, 1)),
                       ("b/_part-3.parquet", slice(0, 1))):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        table.iloc[rows].to_parquet(tmp_path / name, index=False)
    (tmp_path / "_SUCCESS").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not a part")
    pd.testing.assert_frame_equal(read_table(tmp_path), table)


def test_a_glob_is_read_in_path_order(tmp_path, table):
    write_parts(table, tmp_path / "t", [3, 3, 4])
    table.to_parquet(tmp_path / "t" / "other.parquet", index=False)
    pd.testing.assert_frame_equal(read_table(tmp_path / "t" / "part-*.parquet"), table)


def test_empty_parts_add_no_rows_and_one_file_reads_as_before(tmp_path, table):
    write_parts(table, tmp_path / "t", [0, 6, 0, 4, 0])
    frame = read_table(tmp_path / "t")
    pd.testing.assert_frame_equal(frame, table)
    assert frame.index.tolist() == list(range(10))
    pd.testing.assert_frame_equal(read_table(tmp_path / "t" / "part-00001.parquet"), table.iloc[:6])


def test_a_table_whose_parts_are_all_empty_has_no_rows(tmp_path, table):
    write_parts(table.head(0), tmp_path / "t", [0, 0])
    with pytest.raises(DataError, match=r"t: the table has no rows in its 2 parts \(columns: \['user_id', 'score', "):
        read_table(tmp_path / "t")
    with pytest.raises(DataError, match="absent: no such file"):
        read_table(tmp_path / "absent")


def test_parts_with_other_columns_name_the_first_file_that_differs(tmp_path, table):
    folder = write_parts(table, tmp_path / "t", [3, 3, 4])
    table.iloc[3:6].rename(columns={"score": "p"}).to_parquet(folder / "part-00001.parquet", index=False)
    table.iloc[6:].drop(columns="name").to_parquet(folder / "part-00002.parquet", index=False)
    with pytest.raises(DataError) as error:
        read_table(folder)
    assert str(error.value) == (f"{folder / 'part-00001.parquet'}: columns ['user_id', 'p', 'name'] differ from "
                                f"['user_id', 'score', 'name'] in {folder / 'part-00000.parquet'}: every part of a "
                                f"table has the same columns")
    reordered = write_parts(table, tmp_path / "r", [5, 5])  # the same columns in another order are the same table
    table.iloc[5:, ::-1].to_parquet(reordered / "part-00001.parquet", index=False)
    pd.testing.assert_frame_equal(read_table(reordered), table)


def test_a_csv_in_a_directory_is_not_a_part(tmp_path, table):
    (tmp_path / "t").mkdir()
    table.to_csv(tmp_path / "t" / "scores.csv", index=False)
    for path in (tmp_path / "t", tmp_path / "t" / "*.csv"):
        with pytest.raises(DataError, match=re.escape(f"{path}: no table parts (.parquet files) there; its 1 CSV "
                                                      f"files (e.g. scores.csv) are not parts")):
            read_table(path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty: no table parts \(\.parquet files\) there$"):
        read_table(tmp_path / "empty")


def test_a_bad_part_is_named_in_the_error(tmp_path, table):
    folder = write_parts(table, tmp_path / "t", [5, 5])
    (folder / "part-00001.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match="^" + re.escape(f"{folder / 'part-00001.parquet'}: cannot be read as parquet: ")):
        read_table(folder)


def test_parts_written_by_index_read_back_in_order(tmp_path, table):
    for index, rows in ((3, slice(4, 10)), (0, slice(0, 4))):
        write_part(table.iloc[rows].set_index("name"), tmp_path / "parts", index)
    assert sorted(p.name for p in (tmp_path / "parts").iterdir()) == ["part-00000.parquet", "part-00003.parquet"]
    pd.testing.assert_frame_equal(read_table(tmp_path / "parts"), table.drop(columns="name"))


# ------------------------------------------------------------------------------------------- a command end to end


@pytest.fixture(scope="module")
def budget(tmp_path_factory):
    """300 synthetic requests as one file and as a directory of 3 parts (one empty), and the plan of the parts."""
    root = tmp_path_factory.mktemp("budget")
    result = _invoke("allocate", "synth", "budget", "--out", root, "--users", 300, "--seed", 1)
    assert result.exit_code == 0, result.output
    parts = write_parts(pd.read_parquet(root / "scores.parquet"), root / "scores", [120, 0, 180])
    (parts / "_SUCCESS").write_bytes(b"")
    result = _invoke("allocate", "budget", "--scores", parts, "--ratio", 3, "--out", root / "plan")
    assert result.exit_code == 0, result.output
    assert json.loads((root / "plan" / "report.json").read_text())["parts"] == 3
    return root


def test_campaign_build_takes_the_parts_allocate_budget_solved(budget, tmp_path):
    """campaign build --scores DIR (or a glob) gives the campaign built from the whole file."""
    for name, scores in (("from-parts", budget / "scores"), ("from-glob", budget / "scores" / "part-*.parquet"),
                         ("from-file", budget / "scores.parquet")):
        result = _invoke("campaign", "build", "--out", tmp_path / name, "--scores", scores, "--budget-plan",
                         budget / "plan", "--cap", 1000)
        assert result.exit_code == 0, result.output
        assert len(load_campaign(tmp_path / name).populations["customer"]) == 300
    built = {name: pd.read_parquet(tmp_path / name / "customers.parquet") for name in ("from-parts", "from-file")}
    pd.testing.assert_frame_equal(built["from-parts"], built["from-file"])
    versions = {json.loads((tmp_path / name / "campaign.json").read_text())["model_version"]
                for name in ("from-parts", "from-glob", "from-file")}
    assert len(versions) == 1


@pytest.mark.extra("allocation")
def test_campaign_build_takes_the_plan_parts_allocate_quota_wrote(budget, tmp_path):
    result = _invoke("allocate", "synth", "quota", "--out", tmp_path, "--users", 300, "--types", 3)
    assert result.exit_code == 0, result.output
    parts = write_parts(pd.read_parquet(tmp_path / "scores.parquet"), tmp_path / "etv", [150, 150])
    result = _invoke("allocate", "quota", "--scores", parts, "--quotas", tmp_path / "quotas.csv", "--out",
                     tmp_path / "quota")
    assert result.exit_code == 0, result.output
    result = _invoke("campaign", "build", "--out", tmp_path / "c", "--scores", budget / "scores", "--budget-plan",
                     budget / "plan", "--cap", 1000, "--quota-plan", tmp_path / "quota" / "plan")
    assert result.exit_code == 0, result.output
    assert len(load_campaign(tmp_path / "c").assignments) == 300


def test_campaign_build_names_the_part_it_cannot_read(budget, tmp_path):
    parts = write_parts(pd.read_parquet(budget / "scores.parquet"), tmp_path / "scores", [150, 150])
    (parts / "part-00001.parquet").write_bytes(b"truncated")
    result = _invoke("campaign", "build", "--out", tmp_path / "c", "--scores", parts, "--budget-plan",
                     budget / "plan", "--cap", 1000)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"{parts / 'part-00001.parquet'}: cannot be read as parquet" in result.output
    assert len(result.output.strip().splitlines()) == 1
