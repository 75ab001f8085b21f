"""The steps every domain's training over parts shares (promokit.training.shards and shard_loop): the roles of a
part's rows, the first part with rows, an epoch's order of a worker's segments and the validation of a worker's
share, each on a case small enough to check by hand."""

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from promokit.data import DataError
from promokit.training.shard_loop import epoch_order, validate_share
from promokit.training.shards import TEST, TRAIN, VALID, first_with_rows, row_roles, since
from promokit.training.trainer import LocalComm


def test_a_held_out_row_is_test_whatever_validates_and_the_rest_train():
    validates = np.array([True, False, True, False, False, False])
    held = np.array([False, False, True, True, False, False])
    roles = row_roles(6, validates, held)
    assert roles.tolist() == [VALID, TRAIN, TEST, TEST, TRAIN, TRAIN] == [1, 0, 2, 2, 0, 0]
    assert roles.dtype == np.int8
    assert row_roles(3).tolist() == [TRAIN] * 3
    assert row_roles(3, held=[False, True, False]).tolist() == [TRAIN, TEST, TRAIN]


def test_since_marks_the_rows_at_or_after_a_cut_and_nothing_without_one():
    assert since(pd.Series([1, 5, 3]), 3).tolist() == [False, True, True]
    times = pd.Series(pd.to_datetime(["2024-05-01", "2024-05-10", "2024-05-20"]))
    assert since(times, pd.Timestamp("2024-05-10")).tolist() == [False, True, True]
    assert since(np.array([0.5, 0.1]), None) is None
    # two cuts by time, as value and voucher hold out and validate: from 10 validates, from 20 is held out
    times = np.array([5, 10, 15, 20, 25])
    assert row_roles(5, since(times, 10), since(times, 20)).tolist() == [TRAIN, VALID, VALID, TEST, TEST]


def test_the_first_part_with_rows_or_a_one_line_error():
    assert first_with_rows([0, 0, 4, 1], "the table has no rows") == 2
    with pytest.raises(DataError, match=r"^sessions/: no sessions in its 3 parts$"):
        first_with_rows([0, 0, 0], "sessions/: no sessions")


def test_an_epoch_visits_the_segments_in_the_order_its_generator_draws():
    segments = [(0, 0, 3), (1, 0, 2), (2, 5, 9), (4, 0, 1)]
    order = epoch_order(segments, torch.Generator().manual_seed(7))
    expected = torch.randperm(4, generator=torch.Generator().manual_seed(7)).tolist()
    assert order == [segments[k] for k in expected] and sorted(order) == sorted(segments)
    assert epoch_order([], torch.Generator().manual_seed(7)) == []


class Doubling(nn.Module):
    """p = w · x with w = 2; its loss the mean squared error of p against y."""

    labels = ("y", "absent")

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(2.0))

    def forward(self, batch):
        return {"p": self.w * batch["x"]}

    def loss(self, outputs, batch):
        loss = ((outputs["p"] - batch["y"]) ** 2).mean()
        return loss, {"mse": loss}


class RankZeroOfTwo(LocalComm):
    """Rank 0 of two workers: the other worker's share (outputs and labels, as NumPy) arrives with its own."""

    world = 2

    def __init__(self, other):
        super().__init__()
        self.other = other

    def gather(self, obj) -> list:
        return [obj, self.other]


def test_a_worker_share_of_the_validation_is_scored_with_every_other_worker_share():
    net = Doubling().train()
    batches = [{"x": torch.tensor([1.0]), "y": torch.tensor([2.0])},
               {"x": torch.tensor([2.0]), "y": torch.tensor([4.0])}]
    # alone: p = [2, 4] equals y, so the loss is 0; the metrics see the labels of both batches joined
    seen = {}
    record = validate_share(net, LocalComm(), batches, net.labels,
                            lambda labels: seen.update(labels) or {})
    assert record == {"valid_loss": 0.0, "valid_mse": 0.0}
    assert not net.training and list(seen) == ["y"] and seen["y"].tolist() == [2.0, 4.0]
    # with a second worker's row x = 3, y = 5 (p = 6): errors 0, 0, 1 over three rows
    other = [({"p": np.array([6.0], dtype=np.float32)}, {"y": np.array([5.0], dtype=np.float32)})]
    record = validate_share(net, RankZeroOfTwo(other), iter(batches), ["y"], lambda labels: {})
    assert record["valid_loss"] == pytest.approx(1 / 3)
    # a worker without validation rows sends nothing of its own
    record = validate_share(net, RankZeroOfTwo(other), [], ["y"], lambda labels: {})
    assert record["valid_loss"] == pytest.approx(1.0)
