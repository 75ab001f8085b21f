"""What the terminal shows: tables that fold rather than cut at 80 columns, counts as counts, and no interval
from one seed."""

import pandas as pd

from promokit.console import print_table
from promokit.metrics.compare import paired_change


def test_a_wide_table_folds_its_headers_and_prints_counts_as_counts(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    frame = pd.DataFrame({"model": ["esm2", "esmm"], "rows": [11556.0, 900.0], "ctcvr_auc_mean": [0.81234, 0.8],
                          "ctcvr_auc_std": [0.001, 0.002], "ctcvr_gauc_mean": [0.6, 0.61],
                          "cvr_auc_mean": [0.7, 0.71], "cvr_auc_std": [0.01, float("nan")], "seeds": [3, 3]})
    print_table("bench", frame)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out
    assert "11,556" in out and "11556.0000" not in out and "0.8123" in out and "—" in out
    header = [line for line in out.splitlines() if line.startswith("┃")]
    cells = ["".join(part.strip() for part in parts) for parts in zip(*(line.split("┃")[1:-1] for line in header))]
    assert cells == list(frame.columns)


def test_one_seed_gives_a_change_without_an_interval():
    assert paired_change([1.1], [1.0]) == "+10.00 %"
    assert paired_change([1.1, 1.3], [1.0, 1.0]).startswith("+20.00 % [")
