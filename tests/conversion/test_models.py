import math

import pytest
import torch
from torch import nn

from promokit.conversion.models import DNN, ESM2, ESMM, sequential_composition
from promokit.data import DataError
from promokit.nn import FieldEmbedding, binary_log_loss


def test_sequential_composition_matches_esm2_eqs_1_to_4():
    y1, y2, y3, y4 = (torch.tensor([v]) for v in (0.2, 0.5, 0.4, 0.1))
    out = sequential_composition(y1, y2, y3, y4)
    assert out["p_ctr"].item() == pytest.approx(0.2)
    assert out["p_ctavr"].item() == pytest.approx(0.1)               # 0.2 * 0.5
    assert out["p_cvr"].item() == pytest.approx(0.25)                # 0.1 * 0.5 + 0.4 * 0.5
    assert out["p_ctcvr"].item() == pytest.approx(0.05)              # 0.2 * 0.25


def test_binary_log_loss_hand_case_and_weights():
    p, y = torch.tensor([0.8, 0.4]), torch.tensor([1.0, 0.0])
    expected = -(math.log(0.8) + math.log(0.6)) / 2
    assert binary_log_loss(p, y).item() == pytest.approx(expected, rel=1e-6)
    # weight 0 drops a row; weight 3 counts it three times
    assert binary_log_loss(p, y, torch.tensor([1.0, 0.0])).item() == pytest.approx(-math.log(0.8), rel=1e-6)
    three = (-3 * math.log(0.8) - math.log(0.6)) / 4
    assert binary_log_loss(p, y, torch.tensor([3.0, 1.0])).item() == pytest.approx(three, rel=1e-6)
    assert binary_log_loss(p, y, torch.zeros(2)).item() == 0.0


def test_field_embedding_offsets_give_each_field_its_own_rows():
    emb = FieldEmbedding([3, 2], dim=4)
    codes = torch.tensor([[0, 0], [2, 1]])
    out = emb(codes)
    assert out.shape == (2, 8)
    torch.testing.assert_close(out[0, 4:], emb.table.weight[3])      # field 1 code 0 is row 3
    torch.testing.assert_close(out[1, :4], emb.table.weight[2])



def test_oov_dropout_is_identity_in_eval_mode_and_at_zero():
    codes = torch.randint(1, 5, (64, 3))
    for emb in (FieldEmbedding([5, 5, 5], dim=4, oov_dropout=0.5).eval(),
                FieldEmbedding([5, 5, 5], dim=4, oov_dropout=0.0).train()):
        torch.testing.assert_close(emb(codes), emb.table(codes + emb.offsets).flatten(1))


def test_oov_dropout_replaces_a_share_p_of_codes_by_the_oov_row_and_trains_it():
    torch.manual_seed(0)
    emb = FieldEmbedding([4, 3], dim=1, sparse=False, oov_dropout=0.3).train()
    nn.init.constant_(emb.table.weight, 1.0)
    emb.table.weight.data[[0, 4]] = 0.0                   # the OOV rows of both fields embed to 0
    codes = torch.tensor([[3, 2]]).repeat(20_000, 1)
    out = emb(codes)
    assert (out == 0).float().mean().item() == pytest.approx(0.3, abs=0.01)
    out.sum().backward()
    assert emb.table.weight.grad[[0, 4]].abs().min() > 0   # gradients reach the OOV rows
    with pytest.raises(DataError, match="oov_dropout"):
        FieldEmbedding([4], dim=1, oov_dropout=1.0)

def _batch(n=8):
    g = torch.Generator().manual_seed(0)
    click = (torch.rand(n, generator=g) < 0.5).float()
    daction = click * (torch.rand(n, generator=g) < 0.5).float()
    purchase = click * (torch.rand(n, generator=g) < 0.5).float()
    return {"cat": torch.randint(0, 5, (n, 2), generator=g), "num": torch.randn(n, 3, generator=g),
            "click": click, "daction": daction, "purchase": purchase}


@pytest.mark.parametrize("cls, outputs", [(ESM2, {"p_ctr", "p_ctavr", "p_cvr", "p_ctcvr"}),
                                          (ESMM, {"p_ctr", "p_cvr", "p_ctcvr"}),
                                          (DNN, {"p_ctr", "p_cvr", "p_ctcvr"})])
def test_models_return_named_probabilities(cls, outputs):
    model = cls([5, 5], 3, emb_dim=4, hidden=(8,), dropout=0.0)
    batch = _batch()
    out = model(batch)
    assert set(out) == outputs
    torch.testing.assert_close(out["p_ctcvr"], out["p_ctr"] * out["p_cvr"])
    total, parts = model.loss(out, batch)
    assert total.ndim == 0 and all(v.ndim == 0 for v in parts.values())


def test_esm2_loss_is_eq_11_weighted_sum():
    model = ESM2([5, 5], 3, emb_dim=4, hidden=(8,), dropout=0.0, w_ctr=1.0, w_ctavr=0.5, w_ctcvr=2.0)
    batch = _batch()
    out = model(batch)
    total, parts = model.loss(out, batch)
    expected = (binary_log_loss(out["p_ctr"], batch["click"]) + 0.5 * binary_log_loss(out["p_ctavr"], batch["daction"])
                + 2.0 * binary_log_loss(out["p_ctcvr"], batch["purchase"]))
    torch.testing.assert_close(total, expected)


def test_dnn_cvr_loss_ignores_unclicked_rows():
    model = DNN([5, 5], 3, emb_dim=4, hidden=(8,), dropout=0.0)
    batch = _batch(16)
    out = model(batch)
    _, parts = model.loss(out, batch)
    clicked = batch["click"] == 1
    torch.testing.assert_close(parts["cvr"], binary_log_loss(out["p_cvr"][clicked], batch["purchase"][clicked]))


def test_dnn_os_counts_positives_k_times():
    model = DNN([5, 5], 3, emb_dim=4, hidden=(8,), dropout=0.0, oversample=3.0)
    batch = _batch(16)
    out = model(batch)
    _, parts = model.loss(out, batch)
    # replicate the click positives three times and take the plain mean
    rows = torch.cat([torch.arange(16), *(torch.nonzero(batch["click"]).flatten() for _ in range(2))])
    torch.testing.assert_close(parts["ctr"], binary_log_loss(out["p_ctr"][rows], batch["click"][rows]))


def test_attention_unit_weighs_by_the_target_and_ignores_padding():
    from promokit.nn import AttentionUnit

    torch.manual_seed(0)
    unit = AttentionUnit(dim=3, hidden=8)
    history = torch.randn(2, 4, 3)
    target = torch.randn(2, 3)
    mask = torch.tensor([[True, True, False, False], [False, False, False, False]])
    weights = unit.weights(history, target, mask)
    assert weights.shape == (2, 4) and torch.all(weights[~mask] == 0)
    pooled = unit(history, target, mask)
    torch.testing.assert_close(pooled[0], weights[0, 0] * history[0, 0] + weights[0, 1] * history[0, 1])
    assert torch.all(pooled[1] == 0)  # no history → zero vector
    changed = history.clone()
    changed[0, 2:] = 100.0  # padded entries cannot move the result
    torch.testing.assert_close(unit(changed, target, mask)[0], pooled[0])
