r"""The losses of the EOCA paper's §4.1 and its baselines, on the log amount v = log(PA + 1) (eq. 7).

Every loss reads the conversion probability p = pCTCVR as a pair of logs (``log_p``, ``log_1mp``), so that
p = p_ctr · p_cvr can be tiny or close to 1 without underflow. Losses are means over the M rows of the batch.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
#: e^60 ≈ 1e26: beyond any amount, within float32
MAX_LOG_AMOUNT = 60.0


def log1mexp(x: Tensor) -> Tensor:
    """log(1 − exp(x)) for x ≤ 0, accurate on both sides of −log 2 (Mächler 2012)."""
    x = x.clamp(max=-1e-7)
    return torch.where(x > -math.log(2), torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def log_amount_density(v: Tensor, mu: Tensor, sigma: Tensor) -> Tensor:
    r"""log P(v | C = 1, μ, σ) of eq. 8: the normal density of v with the Jacobian 1/y_v, y_v = e^v,

    .. math:: -\log\sigma - \tfrac12\log 2\pi - v - \frac{(v - \mu)^2}{2\sigma^2}
    """
    return -torch.log(sigma) - HALF_LOG_2PI - v - (v - mu) ** 2 / (2 * sigma ** 2)


def esj_loss(log_p: Tensor, log_1mp: Tensor, mu: Tensor, sigma: Tensor, v: Tensor, converted: Tensor) -> Tensor:
    r"""The entire space multi-task joint (ESJ) loss, eq. 12:

    .. math::
        \mathcal{L} = -\frac1M\Big(\sum_{y_i=1} \big[\log p_i + \log P(v_i \mid \mu_i, \sigma_i)\big]
            + \sum_{y_j=0} \log\big(1 - p_j + p_j\,\tfrac{1}{\sqrt{2\pi}\sigma_j} e^{-\mu_j^2/2\sigma_j^2}\big)\Big)

    An unconverted row is either no intention (R2, probability 1 − p) or intention with a zero amount (R3, p
    times the density of eq. 10 at v = 0); the sum is taken with ``logaddexp`` so that it cannot underflow.
    """
    positive = log_p + log_amount_density(v, mu, sigma)
    r3 = log_p - torch.log(sigma) - HALF_LOG_2PI - mu ** 2 / (2 * sigma ** 2)
    negative = torch.logaddexp(log_1mp, r3)
    return -torch.where(converted > 0, positive, negative).mean()


def ziln_loss(log_p: Tensor, log_1mp: Tensor, mu: Tensor, sigma: Tensor, v: Tensor, converted: Tensor) -> Tensor:
    r"""The zero-inflated lognormal loss (Wang, Liu & Miao 2019) on ESDPM's outputs: cross-entropy of p on every
    row plus the lognormal likelihood of the converted rows' amounts only,

    .. math::
        \mathcal{L} = -\frac1M\Big(\sum_{y_i=1} \big[\log p_i + \log P(v_i \mid \mu_i, \sigma_i)\big]
            + \sum_{y_j=0} \log(1 - p_j)\Big)

    It is eq. 12 without the R3 term: an unconverted row says nothing about μ and σ.
    """
    positive = log_p + log_amount_density(v, mu, sigma)
    return -torch.where(converted > 0, positive, log_1mp).mean()


def binary_nll(log_p: Tensor, log_1mp: Tensor, label: Tensor) -> Tensor:
    """Mean cross-entropy of a probability given as its two logs."""
    return -torch.where(label > 0, log_p, log_1mp).mean()


def expected_value(log_p: Tensor, mu: Tensor, sigma: Tensor) -> Tensor:
    r"""ETV = pCTCVR · (exp(μ + σ²/2) − 1), eq. 13: p times the mean of the lognormal y_v = PA + 1 minus the 1.

    A negative expected amount (μ + σ²/2 < 0) is 0: an amount cannot be negative; the exponent is capped at
    ``MAX_LOG_AMOUNT`` so a wild early-training σ gives a huge but finite value.
    """
    return torch.exp(log_p) * torch.expm1((mu + sigma ** 2 / 2).clamp(max=MAX_LOG_AMOUNT)).clamp_min(0.0)
