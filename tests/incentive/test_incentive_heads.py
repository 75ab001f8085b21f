"""The incentive response heads against hand-computed cases: eqs. 8–10, Cox, SBBM (eq. 21) and the merchant head."""

import math

import numpy as np
import pytest
import torch

from promokit.incentive.models._curve import ValueList, response_nll
from promokit.incentive.models.cox import CoxResponse
from promokit.incentive.models.dssm import DSSMCostResponse
from promokit.incentive.models.hazard import HazardResponse
from promokit.incentive.models.merchant import MerchantResponse
from promokit.incentive.models.sbbm import SemiBlackBoxResponse

LEVELS = [1.0, 2.0, 4.0]


def test_hazard_equations_and_censored_likelihood_by_hand():
    head = HazardResponse(2, LEVELS, fused_lasso=0.5)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[0.1, 0.0], [0.3, -0.2], [-0.5, 0.4]]))
        head.bias.copy_(torch.tensor([-1.0, 0.0, 0.5]))
    h = torch.tensor([[1.0, 2.0], [0.0, -1.0]])
    out = head(h)
    # widths (r_j - r_{j-1}) / r_K with r_0 = 0: 1/4, 1/4, 2/4
    widths = [0.25, 0.25, 0.5]
    for i, row in enumerate(h.tolist()):
        rates = [math.exp(w[0] * row[0] + w[1] * row[1] + b)
                 for w, b in zip(head.weight.tolist(), head.bias.tolist())]
        cumulative = np.cumsum([r * d for r, d in zip(rates, widths)])
        np.testing.assert_allclose(out["hazard"][i].detach().numpy(), rates, rtol=1e-6)
        np.testing.assert_allclose(out["response"][i].detach().numpy(), 1 - np.exp(-cumulative), rtol=1e-6)
    # eq. 9: row 0 redeemed at r_2 → −log(1 − exp(−Λ(r_2))); row 1 did not at r_3 → Λ(r_3)
    nll = response_nll(out, torch.tensor([1, 2]), torch.tensor([1.0, 0.0])).detach().numpy()
    lam = out["hazard"].detach().numpy() * np.array(widths)
    expected = [-math.log(1 - math.exp(-lam[0, :2].sum())), lam[1].sum()]
    np.testing.assert_allclose(nll, expected, rtol=1e-6)
    # fused lasso: ζ Σ_j ‖w_{j+1} − w_j‖₁ = 0.5 · (|0.2| + |−0.2| + |−0.8| + |0.6|)
    assert head.penalty().item() == pytest.approx(0.5 * 1.8)


@pytest.mark.parametrize("head_class", [HazardResponse, CoxResponse, SemiBlackBoxResponse, MerchantResponse])
def test_responses_are_monotone_in_the_value_for_any_weights(head_class):
    torch.manual_seed(0)
    levels = [0.0, 5.0, 10.0, 30.0, 31.0, 100.0]
    for _ in range(20):
        head = head_class(8, levels)
        for p in head.parameters():
            torch.nn.init.normal_(p, std=3.0)
        response = head(torch.randn(64, 8) * 3)["response"]
        assert torch.isfinite(response).all()
        assert (response.diff(dim=1) >= -1e-6).all()


def test_curves_are_probabilities_and_log_terms_agree():
    torch.manual_seed(1)
    h = torch.randn(32, 4)
    for head in (HazardResponse(4, LEVELS), CoxResponse(4, LEVELS), SemiBlackBoxResponse(4, LEVELS),
                 DSSMCostResponse(4, LEVELS)):
        out = head(h)
        p = out["response"]
        assert ((p >= 0) & (p <= 1)).all()
        torch.testing.assert_close(out["log_response"].exp(), p, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(out["log_no_response"].exp(), 1 - p, atol=1e-5, rtol=1e-4)


def test_cox_is_proportional_and_sbbm_is_eq_21():
    cox = CoxResponse(2, LEVELS)
    with torch.no_grad():
        cox.weight.weight.copy_(torch.tensor([[1.0, -1.0]]))
        cox.baseline.copy_(torch.tensor([0.0, 1.0, -1.0]))
    cumulative = -torch.log1p(-cox(torch.tensor([[0.5, 0.0], [0.0, 0.5]]))["response"])
    ratio = (cumulative[0] / cumulative[1]).detach().numpy()
    np.testing.assert_allclose(ratio, math.exp(1.0), rtol=1e-5)  # same shape, scaled by exp(w·h)

    sbbm = SemiBlackBoxResponse(1, LEVELS)
    with torch.no_grad():
        sbbm.curve.gradient.weight.fill_(2.0), sbbm.curve.gradient.bias.fill_(0.0)
        sbbm.curve.intercept.weight.fill_(-1.0), sbbm.curve.intercept.bias.fill_(0.5)
    f = sbbm(torch.tensor([[1.0]]))["response"][0].detach().numpy()
    slope = math.log1p(math.exp(2.0))
    expected = [1 / (1 + math.exp(-(slope * r / 4 - 0.5))) for r in LEVELS]
    np.testing.assert_allclose(f, expected, rtol=1e-6)


def test_a_zero_lowest_level_gets_a_free_response():
    values = ValueList([0.0, 50.0, 100.0])
    np.testing.assert_allclose(values.width.numpy(), [0.5, 0.5, 0.5])
    head = HazardResponse(3, [0.0, 50.0, 100.0])
    assert (head(torch.randn(5, 3))["response"][:, 0] > 0).all()


def test_hazard_learns_a_change_point():
    """Rows whose true response jumps between the 2nd and 3rd value: the fitted hazard jumps there too."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    levels = [1.0, 2.0, 3.0, 4.0, 5.0]
    true_rate = np.array([0.05, 0.05, 0.6, 0.6, 0.6])  # per unit of value
    n = 6000
    offered = rng.integers(0, 5, n)
    truth = 1 - np.exp(-np.cumsum(true_rate)[offered])
    label = torch.tensor((rng.random(n) < truth).astype(np.float32))
    head = HazardResponse(1, levels, fused_lasso=0.0)
    h = torch.ones(n, 1)
    optimiser = torch.optim.Adam(head.parameters(), lr=0.05)
    for _ in range(300):
        optimiser.zero_grad()
        loss = response_nll(head(h), torch.tensor(offered), label).mean()
        loss.backward()
        optimiser.step()
    hazard = head(h[:1])["hazard"][0].detach().numpy() / 5  # per unit of value
    assert np.argmax(np.diff(hazard)) == 1
    np.testing.assert_allclose(hazard, true_rate, atol=0.12)
