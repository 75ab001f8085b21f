"""How a bench report says where the models stand against the floor."""

import pandas as pd

from promokit.experiments.bench_summary import add_floor_section, floor_verdict
from promokit.report import Report


def _metrics(floor: float, others: dict[str, float]) -> pd.DataFrame:
    rows = [{"model": "lr", "seed": s, "auc": floor} for s in (0, 1)]
    rows += [{"model": m, "seed": s, "auc": v} for m, v in others.items() for s in (0, 1)]
    return pd.DataFrame(rows + [{"model": "oracle", "seed": 0, "auc": 0.99}])


def test_a_floor_that_wins_is_said_plainly():
    sentence = floor_verdict(_metrics(0.8, {"dnn": 0.7, "esm2": 0.75}), "lr", "auc", what="test AUC")
    assert sentence == "The floor lr has the best test AUC (0.8): none of the 2 other models beats it here."


def test_the_best_model_and_how_many_beat_the_floor():
    sentence = floor_verdict(_metrics(0.7, {"dnn": 0.72, "esm2": 0.75, "din": 0.6}), "lr", "auc")
    assert sentence == ("esm2 has the best mean auc (0.75 against the floor lr's 0.7); 2 of the 3 other models "
                        "beat the floor.")


def test_lower_is_better_and_missing_floor():
    metrics = _metrics(0.5, {"dnn": 0.4}).rename(columns={"auc": "logloss"})
    assert floor_verdict(metrics, "lr", "logloss", higher_is_better=False).startswith("dnn has the best")
    assert floor_verdict(metrics, "gbdt", "logloss") is None
    assert floor_verdict(_metrics(0.5, {}), "lr", "auc") is None  # the oracle is no model


def test_the_section_holds_the_sentences_said():
    report = Report("bench")
    add_floor_section(report, [None, "The floor lr has the best test AUC (0.8).", None])
    assert report.sections == [("Against the floor", "The floor lr has the best test AUC (0.8).", ())]
    empty = Report("bench")
    add_floor_section(empty, [None])
    assert empty.sections == []
