"""promokit.data.part_keys: a key repeated across (or within) parts is found and named without gathering the keys."""

import numpy as np
import pandas as pd
import pytest

from promokit.data import part_keys
from promokit.data.errors import DataError
from promokit.data.part_keys import check_unique_keys
from promokit.scale.executor import make_executor


def write(tmp_path, groups: list[list]) -> list:
    paths = []
    for k, ids in enumerate(groups):
        path = tmp_path / f"part-{k:05d}.parquet"
        pd.DataFrame({"user_id": ids, "score_1": np.arange(len(ids), dtype=float)}).to_parquet(path, index=False)
        paths.append(path)
    return paths


def test_unique_keys_pass(tmp_path):
    paths = write(tmp_path, [[f"u{i}" for i in range(0, 500)], [], [f"u{i}" for i in range(500, 1200)]])
    check_unique_keys(paths, "user_id", tmp_path / "scratch", buckets=7)
    assert not (tmp_path / "scratch").exists()  # scratch removed


def test_a_key_in_two_parts_names_both_files_and_rows(tmp_path):
    paths = write(tmp_path, [["a", "b", "c"], ["d", "e"], ["f", "c", "g"]])
    with pytest.raises(DataError, match=r"user_id 'c' is in two parts, .*part-00000.parquet \(row 2\) and "
                                        r".*part-00002.parquet \(row 1\)"):
        check_unique_keys(paths, "user_id", tmp_path / "scratch", buckets=3)


def test_a_key_on_several_rows_of_one_part_is_one_key_and_integer_keys(tmp_path):
    """A long score table holds a user on one row per level: that is the part's business, not a repeat."""
    check_unique_keys(write(tmp_path, [[1, 1, 2, 2], [3, 3, 4, 4]]), "user_id", tmp_path / "scratch")
    paths = write(tmp_path, [[1, 1, 2, 2], [3, 3, 2, 2]])
    with pytest.raises(DataError, match=r"user_id 2 is in two parts, .*part-00000.parquet \(row 2\) and "
                                        r".*part-00001.parquet \(row 2\)"):
        check_unique_keys(paths, "user_id", tmp_path / "scratch")


def test_a_hash_collision_is_not_reported(tmp_path, monkeypatch):
    """Every key hashed alike: the buckets see one hash many times, the keys themselves settle it."""
    monkeypatch.setattr(part_keys, "_hashes", lambda keys: np.zeros(len(keys), dtype=np.uint64))
    paths = write(tmp_path, [["a", "b"], ["c"]])
    check_unique_keys(paths, "user_id", tmp_path / "scratch")  # a, b and c hash alike and differ


def test_a_missing_column_names_the_file(tmp_path):
    paths = write(tmp_path, [["a"]])
    with pytest.raises(DataError, match=r"part-00000.parquet: cannot read its 'customer' column"):
        check_unique_keys(paths, "customer", tmp_path / "scratch")


def test_on_ray_the_same_answer(ray_cluster, tmp_path):
    paths = write(tmp_path, [[f"u{i}" for i in range(k * 100, k * 100 + 100)] for k in range(4)] + [["u7"]])
    executor = make_executor("ray", address=ray_cluster.address)
    with pytest.raises(DataError, match=r"user_id 'u7' is in two parts, .*part-00000.parquet \(row 7\) and "
                                        r".*part-00004.parquet \(row 0\)"):
        check_unique_keys(paths, "user_id", tmp_path / "scratch", map_parts=executor.map)
    check_unique_keys(paths[:4], "user_id", tmp_path / "scratch", map_parts=executor.map)


def test_integer_keys_in_one_part_and_text_in_another_are_refused(tmp_path):
    paths = write(tmp_path, [[1, 2], [], ["3", "4"]])
    with pytest.raises(DataError, match=r"user_id is integer in .*part-00000.parquet but text in .*part-00002"):
        check_unique_keys(paths, "user_id", tmp_path / "scratch")
