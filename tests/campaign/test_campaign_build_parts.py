"""campaign build from score parts: the lookup merged part by part is the one-table lookup, byte for byte."""

import hashlib
import json
import tracemalloc

import numpy as np
import pandas as pd
import pytest
from conftest import write_parts
from test_serve import LEVELS, curves, plan_folder

from promokit.campaign import lookup
from promokit.campaign.directory import build as build_campaign
from promokit.campaign.directory import load_campaign
from promokit.data import DataError

LOOKUP_FILES = ("ids", "scores", "mean")


def scores(n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` customers with ids of mixed lengths and scripts, in a shuffled order."""
    rng = np.random.default_rng(seed)
    ids = [f"c{i}" + "é" * (i % 3) + "x" * (i % 7) for i in rng.permutation(n)]
    f = curves(n, seed)
    return pd.DataFrame({"user_id": ids, **{f"score_{level:g}": f[:, j] for j, level in enumerate(LEVELS)}})


def lookup_bytes(folder) -> dict[str, bytes]:
    return {name: (folder / "lookup" / "customer" / f"{name}.npy").read_bytes() for name in LOOKUP_FILES}


def model_version(folder) -> str:
    return json.loads((folder / "campaign.json").read_text())["model_version"]


@pytest.fixture
def plan(tmp_path):
    plan_folder(tmp_path / "plan", curves(50))
    return tmp_path / "plan"


def test_parts_give_the_lookup_and_model_version_of_the_table_read_whole(tmp_path, plan, monkeypatch):
    table = scores(600)
    table.to_parquet(tmp_path / "whole.parquet", index=False)
    parts = write_parts(table, tmp_path / "parts", [150, 0, 90, 1, 359])  # an empty part is skipped
    monkeypatch.setattr(lookup, "MERGE_ROWS", 40)  # many merge batches of a few rows from each part
    built = {name: build_campaign(tmp_path / "built" / name, source, plan, cap=100.0)
             for name, source in (("whole", tmp_path / "whole.parquet"), ("parts", parts), ("frame", table))}
    made = {name: lookup_bytes(campaign.folder) for name, campaign in built.items()}
    assert made["parts"] == made["whole"] == made["frame"]
    # the model version is the hash the one-table build gave: population, ids joined by newlines, scores' bytes
    digest = hashlib.sha256(b"customer" + "\n".join(table["user_id"]).encode()
                            + np.ascontiguousarray(table.drop(columns="user_id").to_numpy(np.float64)).tobytes())
    assert {model_version(campaign.folder) for campaign in built.values()} == {digest.hexdigest()[:12]}
    population = built["parts"].populations["customer"]
    assert population.ids.tolist() == sorted(i.encode() for i in table["user_id"])
    row = population.row("c5éé" + "x" * 5)
    np.testing.assert_array_equal(population.scores[row], table.set_index("user_id").loc["c5éé" + "x" * 5])
    np.testing.assert_allclose(population.mean, table.drop(columns="user_id").mean().to_numpy(), rtol=1e-12)
    wide = {name: pd.read_parquet(campaign.folder / "customers.parquet") for name, campaign in built.items()}
    pd.testing.assert_frame_equal(wide["parts"], wide["whole"])
    assert sorted(p.name for p in built["parts"].folder.iterdir()) == ["campaign.json", "customers.parquet", "lookup"]


def test_an_id_in_two_parts_is_refused_naming_both_parts(tmp_path, plan):
    table = scores(60)
    table.loc[45, "user_id"] = table.loc[3, "user_id"]
    parts = write_parts(table, tmp_path / "parts", [20, 20, 20])
    with pytest.raises(DataError) as error:
        build_campaign(tmp_path / "c", parts, plan, cap=100.0)
    id_ = table.loc[3, "user_id"]
    assert str(error.value) == (f"user_id {id_!r} is in two parts, {parts / 'part-00000.parquet'} (row 3) and "
                                f"{parts / 'part-00002.parquet'} (row 5): each user_id must be in one part")
    assert not (tmp_path / "c").exists()  # a failed build leaves no folder behind


def test_a_bad_score_names_its_part_and_row(tmp_path, plan):
    table = scores(40)
    table.loc[33, "score_5"] = 1.5
    parts = write_parts(table, tmp_path / "parts", [10, 10, 10, 10])
    with pytest.raises(DataError) as error:
        build_campaign(tmp_path / "c", parts, plan, cap=100.0)
    assert str(error.value) == (f"{parts / 'part-00003.parquet'}: the customer score table has 1 rows with a "
                                f"response probability outside [0, 1] or missing, e.g. score_5 = 1.5 for user_id "
                                f"{table.loc[33, 'user_id']!r} (row 3)")


def test_parts_without_rows_or_with_other_columns_are_refused(tmp_path, plan):
    table = scores(10)
    empty = write_parts(table.iloc[:0], tmp_path / "empty", [0, 0])
    with pytest.raises(DataError, match=r"the table has no rows in its 2 parts \(columns: \['user_id', "):
        build_campaign(tmp_path / "c", empty, plan, cap=100.0)
    other = write_parts(table, tmp_path / "other", [5, 5])
    table.iloc[5:].rename(columns={"score_5": "score_6"}).to_parquet(other / "part-00001.parquet", index=False)
    with pytest.raises(DataError, match=r"part-00001.parquet: columns .* differ from .* every part of a table"):
        build_campaign(tmp_path / "c", other, plan, cap=100.0)


def peak_bytes(tmp_path, plan, parts: int, rows: int = 2000) -> int:
    folder = write_parts(scores(parts * rows, seed=parts), tmp_path / f"p{parts}", [rows] * parts)
    tracemalloc.start()
    try:
        build_campaign(tmp_path / f"c{parts}", folder, plan, cap=100.0)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_is_bounded_by_a_few_parts_whatever_their_number(tmp_path, plan, monkeypatch):
    monkeypatch.setattr(lookup, "MERGE_ROWS", 1000)
    monkeypatch.setattr(lookup, "HASH_BLOCK", 1 << 16)  # the scores are hashed in blocks of this many bytes
    few, many = peak_bytes(tmp_path, plan, 8), peak_bytes(tmp_path, plan, 32)  # 4× the rows, 4× as many parts
    assert many < 1.1 * few, (few, many)  # read whole, 64,000 rows would take some 10 MB more
    assert len(load_campaign(tmp_path / "c32").populations["customer"]) == 64_000
