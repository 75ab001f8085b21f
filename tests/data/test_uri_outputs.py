"""What writes a local folder (a model directory, a campaign, a plan, scores, a report) refuses a URI in one line,
before anything is written: no local folder named after the scheme appears."""

import pandas as pd
import pytest
from test_campaign_export import invoke, one_line_error

from promokit.data import DataError
from promokit.data.uris import local_dir
from promokit.training.artifact import write_model_dir


def test_local_dir_takes_paths_and_refuses_uris(tmp_path):
    assert local_dir(tmp_path / "x") == tmp_path / "x" and local_dir("relative/y").as_posix() == "relative/y"
    with pytest.raises(DataError, match=r"^`out` is s3://bucket/model: this writes to a local folder only"):
        local_dir("s3://bucket/model")


def test_a_model_directory_is_not_written_to_a_uri(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="`path` is s3://bucket/model"):
        write_model_dir("s3://bucket/model", {}, {}, None)
    assert not (tmp_path / "s3:").exists()


def test_commands_that_write_local_folders_refuse_a_uri_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scores = pd.DataFrame({"user_id": ["a", "b"], "score_0": [0.1, 0.2], "score_5": [0.3, 0.4]})
    scores.to_parquet(tmp_path / "scores.parquet")
    one_line_error(invoke("allocate", "budget", "--scores", tmp_path / "scores.parquet", "--ratio", "4",
                          "--out", "s3://bucket/plan"), "is s3://bucket/plan: this writes to a local folder only")
    one_line_error(invoke("campaign", "build", "--out", "s3://bucket/campaign", "--scores", tmp_path / "scores.parquet",
                          "--budget-plan", tmp_path, "--cap", "10"), "is s3://bucket/campaign")
    assert not (tmp_path / "s3:").exists()
