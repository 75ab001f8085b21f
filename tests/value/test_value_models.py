"""The value domain's losses (EOCA eqs. 12–13) against hand-computed cases, and its shared blocks."""

import math

import pytest
import torch

from promokit.nn.mmoe import MMoE
from promokit.nn.sequence import BehaviourEncoder
from promokit.value.losses import binary_nll, esj_loss, expected_value, log1mexp, ziln_loss


def _normal_pdf(x, mu, sigma):
    return math.exp(-(x - mu) ** 2 / (2 * sigma ** 2)) / (math.sqrt(2 * math.pi) * sigma)


def _case():
    # row 0 converted with PA = 99 (y_v = 100, v = log 100); row 1 did not
    p = torch.tensor([0.2, 0.3], dtype=torch.float64)
    mu = torch.tensor([4.0, 3.0], dtype=torch.float64)
    sigma = torch.tensor([0.5, 1.5], dtype=torch.float64)
    v = torch.tensor([math.log(100.0), 0.0], dtype=torch.float64)
    converted = torch.tensor([1.0, 0.0], dtype=torch.float64)
    return p, mu, sigma, v, converted


def test_esj_loss_matches_eq_12_by_hand_including_the_r3_term():
    p, mu, sigma, v, converted = _case()
    loss = esj_loss(p.log(), (1 - p).log(), mu, sigma, v, converted)
    # converted row: log p + log( N(v; μ, σ) / y_v )
    positive = math.log(0.2) + math.log(_normal_pdf(math.log(100.0), 4.0, 0.5) / 100.0)
    # unconverted row: log(1 − p + p · N(0; μ, σ)) — R2 plus R3
    negative = math.log(0.7 + 0.3 * _normal_pdf(0.0, 3.0, 1.5))
    assert loss.item() == pytest.approx(-(positive + negative) / 2, rel=1e-12)


def test_ziln_is_eq_12_without_the_r3_term():
    p, mu, sigma, v, converted = _case()
    loss = ziln_loss(p.log(), (1 - p).log(), mu, sigma, v, converted)
    positive = math.log(0.2) + math.log(_normal_pdf(math.log(100.0), 4.0, 0.5) / 100.0)
    assert loss.item() == pytest.approx(-(positive + math.log(0.7)) / 2, rel=1e-12)


def test_esj_r3_term_does_not_underflow_for_tiny_probabilities():
    log_p = torch.tensor([-200.0, -200.0], dtype=torch.float64)
    loss = esj_loss(log_p, log1mexp(log_p), torch.tensor([0.0, 30.0]), torch.tensor([0.1, 0.1]),
                    torch.tensor([0.0, 0.0]), torch.tensor([0.0, 0.0]))
    assert torch.isfinite(loss)
    grad_mu = torch.tensor([1.0, 1.0], dtype=torch.float64, requires_grad=True)
    esj_loss(torch.tensor([-1e-3, -80.0], dtype=torch.float64), log1mexp(torch.tensor([-1e-3, -80.0])),
             grad_mu, torch.tensor([1.0, 1.0]), torch.zeros(2), torch.zeros(2)).backward()
    assert torch.isfinite(grad_mu.grad).all()


def test_expected_value_is_eq_13():
    p, mu, sigma = 0.25, 3.0, 0.8
    etv = expected_value(torch.tensor([math.log(p)]), torch.tensor([mu]), torch.tensor([sigma]))
    assert etv.item() == pytest.approx(p * (math.exp(mu + sigma ** 2 / 2) - 1), rel=1e-6)
    assert expected_value(torch.tensor([0.0]), torch.tensor([-2.0]), torch.tensor([0.5])).item() == 0.0


def test_log1mexp_is_accurate_on_both_branches():
    x = torch.tensor([-1e-6, -0.1, -0.69, -0.7, -5.0, -40.0], dtype=torch.float64)
    assert torch.allclose(log1mexp(x), torch.log(1 - torch.exp(x)), rtol=1e-6)
    assert torch.isfinite(log1mexp(torch.tensor([0.0]))).all()


def test_binary_nll_is_the_cross_entropy():
    p = torch.tensor([0.9, 0.2])
    y = torch.tensor([1.0, 0.0])
    expected = -(math.log(0.9) + math.log(0.8)) / 2
    assert binary_nll(p.log(), (1 - p).log(), y).item() == pytest.approx(expected, rel=1e-6)


def test_mmoe_gates_mix_the_experts_per_task():
    torch.manual_seed(0)
    mmoe = MMoE(6, n_tasks=3, n_experts=4, expert_hidden=(8,), expert_dim=5)
    outputs = mmoe(torch.randn(7, 6))
    assert len(outputs) == 3 and all(o.shape == (7, 5) for o in outputs)
    assert not torch.allclose(outputs[0], outputs[1])  # each task has its own gate


def test_behaviour_encoder_ignores_padding_and_zeroes_empty_rows():
    torch.manual_seed(0)
    encoder = BehaviourEncoder([5, 4], max_len=6, dim=8, heads=2, out_dim=12).eval()
    tokens = torch.full((3, 6, 2), -1, dtype=torch.long)
    tokens[0, :2] = torch.tensor([[1, 2], [3, 1]])
    tokens[1, :1] = torch.tensor([[4, 3]])
    out = encoder(tokens)
    assert out.shape == (3, 12)
    assert torch.equal(out[2], torch.zeros(12))
    assert torch.isfinite(out).all() and out[0].abs().sum() > 0
    alone = encoder(tokens[:1])
    assert torch.allclose(alone[0], out[0], atol=1e-6)  # a row does not see the others
