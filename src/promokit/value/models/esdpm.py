"""ESDPM, the entire space deep probabilistic model (EOCA §4.1), and the multi-task baselines of Tables 1–2 as
its configurations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from promokit.data.encoders import combine_moments
from promokit.nn import MLP, WIDE_L2, WideTerm
from promokit.nn.mmoe import MMoE
from promokit.value.losses import binary_nll, esj_loss, expected_value, log1mexp, ziln_loss
from promokit.value.models.encoder import DeliveryEncoder

BOTTOMS = ("mmoe", "shared", "separate")
CONVERSIONS = ("esmm", "direct")
AMOUNTS = ("lognormal", "mse", None)
AMOUNT_LOSSES = {"esj": esj_loss, "ziln": ziln_loss}
#: The conversion logits a wide term joins, each with its label and the rows it is observed on.
WIDE_TARGETS = {"ctr": ("click", {}), "cvr": ("convert", {"click": 1}), "ctcvr": ("convert", {})}


@dataclass(frozen=True)
class AmountStart:
    """Where :meth:`ESDPM.init_amount` starts the amount towers: the number of converted training rows, the mean
    and spread (sample standard deviation) of v = log(1 + amount) over them, and the mean of v over every training
    row."""

    converted: int
    mean: float
    spread: float
    overall: float

    @classmethod
    def of(cls, v: Tensor, converted: Tensor) -> AmountStart:
        positive = v[converted > 0]
        n = len(positive)
        return cls(n, float(positive.mean()) if n else math.nan, float(positive.std()) if n > 1 else math.nan,
                   float(v.mean()))

    @classmethod
    def from_moments(cls, converted: list[tuple], every: list[tuple]) -> AmountStart:
        """From the :meth:`~promokit.data.encoders.NumericEncoder.moments` of v over the converted training rows and
        over every training row of each part of a dataset."""
        _, n, mean, m2 = combine_moments(converted)
        _, _, overall, _ = combine_moments(every)
        return cls(n, mean if n else math.nan, math.sqrt(m2 / (n - 1)) if n > 1 else math.nan, overall)


class ESDPM(nn.Module):
    r"""Expected transaction value of a delivery: pCTCVR, the amount's distribution and ETV (eqs. 6–14).

    The delivery's vector e (eq. 14, :class:`DeliveryEncoder`) feeds a multi-task bottom and one tower per task:

    - conversion ``"esmm"``: CTR and CVR towers, pCTCVR = pCTR · pCVR with the post-click CVR a hidden variable
      as ESMM; ``"direct"``: one tower predicts pCTCVR (the paper's MMoE, Shared-Bottom and DNN-C);
    - amount ``"lognormal"``: μ and σ towers (σ = ``sigma_floor`` + softplus) of the log amount v = log(PA + 1),
      trained with ``loss`` ``"esj"`` (eq. 12) or ``"ziln"``; ETV = pCTCVR · (exp(μ + σ²/2) − 1) (eq. 13);
      ``"mse"``: one tower v̂ fitted to v over every delivery (zeros included) with the squared error, ETV = exp(v̂)
      − 1; ``None``: no amount, ETV = pCTCVR (ESMM: allocation by conversion alone);
    - bottom ``"mmoe"`` (MMoE with one gate per tower, §4.1.2), ``"shared"`` (3 shared layers, 2-layer towers)
      or ``"separate"`` (one network per task, each with its own input encoder: DNN-C and DNN-V).

    With the ESMM conversion the CTR tower is also fitted to the clicks (ESMM's L_ctr); the conversion enters the
    ESJ/ZILN loss, or a cross-entropy when there is no lognormal amount. The floor on σ keeps eq. 12 bounded:
    its R3 term is a density at v = 0, which grows without limit as σ → 0 with μ → 0.

    ``wide`` adds a linear term over the user's, the fund's and the context's one-hot fields and numbers to the
    conversion logits (CTR and CVR, or the direct CTCVR; :class:`~promokit.nn.WideTerm`: ``"none"``, ``"joint"``
    or ``"offset"``, a logistic regression solved on the training deliveries first; ``wide_l2`` is the joint
    part's decay). The amount towers have none.

    Outputs: ``p_ctcvr``, ``etv``, and where they exist ``p_ctr``, ``p_cvr``, ``mu``, ``sigma``, ``v_hat``.

    Paper: "Expected Transaction Value Optimization for Precise Marketing in FinTech Platforms" (Yunpeng Weng, Xing
    Tang, Liang Chen, Dugang Liu, Xiuqiang He; FiT, Tencent; the text, ``eoca-expected-transaction-value.txt``, has
    the ACM template's placeholder for venue and DOI), §4.1, the entire space deep probabilistic model:

    .. math::
        v = \log(PA + 1) \quad (7), \qquad
        \mathcal L = -\frac1M\Big(\sum_{y_i=1} \log P(y = 1, v = v_i) + \sum_{y_j=0} \log P(y = 0, v = 0)\Big)
        \quad (12)

    .. math::
        P(y = 0, v = 0) \approx (1 - p) + p\, \tfrac{1}{\sqrt{2\pi}\sigma} e^{-\mu^2 / 2\sigma^2} \quad (10), \qquad
        ETV = pCTCVR \times \big(\exp(\mu + \sigma^2 / 2) - 1\big) \quad (13)

    Args:
        sizes: the input widths (:meth:`~promokit.value.inputs.InputEncoders.sizes`), :class:`DeliveryEncoder`'s
            first arguments.
        bottom: ``"mmoe"``, ``"shared"`` or ``"separate"``.
        conversion: ``"esmm"`` (pCTCVR = pCTR · pCVR) or ``"direct"``.
        amount: ``"lognormal"`` (μ, σ), ``"mse"`` (v̂) or ``None``.
        loss: the lognormal amount's loss, ``"esj"`` (eq. 12) or ``"ziln"``.
        graph: read the consumption graph (e_c of eq. 14).
        emb_dim: embedding size per categorical field.
        n_experts: MMoE's experts.
        expert_hidden: hidden widths of each expert.
        expert_dim: width of the bottom's output (each expert's, or each shared layer's).
        tower_hidden: hidden widths of each task's tower.
        dropout: dropout in the bottom, the towers and the GNN.
        sigma_floor: the least σ.
        conv: the consumption graph's aggregation (``"gat"``: the paper's graph attention).
        fanouts: neighbours sampled per hop of the consumption graph in training.
        wide: the wide term's mode, ``"none"``, ``"joint"`` or ``"offset"``.
        wide_l2: the joint wide term's decay.

    Shapes:
        - **input:** a batch of B deliveries as :class:`DeliveryEncoder` reads it; for :meth:`loss` also
          ``batch["click"]``, ``batch["convert"]`` and ``batch["v"]`` ``(B,)``
        - **output:** ``p_ctcvr``, ``etv`` and, where they exist, ``p_ctr``, ``p_cvr``, ``mu``, ``sigma``,
          ``v_hat``, ``(B,)`` each (and the log-probabilities :meth:`loss` reads: ``log_p``, ``log_1mp``, …)
    """

    labels = ("click", "convert", "v")

    def __init__(self, sizes: dict, bottom: str = "mmoe", conversion: str = "esmm", amount: str | None = "lognormal",
                 loss: str = "esj", graph: bool = True, emb_dim: int = 16, n_experts: int = 4,
                 expert_hidden: Sequence[int] = (256,), expert_dim: int = 128, tower_hidden: Sequence[int] = (64,),
                 dropout: float = 0.1, sigma_floor: float = 0.1, conv: str = "gat", fanouts: Sequence[int] = (10, 10),
                 wide: str = "none", wide_l2: float = WIDE_L2):
        super().__init__()
        for name, value, allowed in (("bottom", bottom, BOTTOMS), ("conversion", conversion, CONVERSIONS),
                                     ("amount", amount, AMOUNTS), ("loss", loss, tuple(AMOUNT_LOSSES))):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        self.conversion, self.amount, self.sigma_floor = conversion, amount, sigma_floor
        self.amount_loss = AMOUNT_LOSSES[loss]
        self.towers = ["ctr", "cvr"] if conversion == "esmm" else ["ctcvr"]
        self.towers += {"lognormal": ["mu", "sigma"], "mse": ["v_hat"], None: []}[amount]
        # DNN-C / DNN-V: the conversion towers and the amount towers each get their own network
        groups = [[t for t in self.towers if t in ("ctr", "cvr", "ctcvr")],
                  [t for t in self.towers if t in ("mu", "sigma", "v_hat")]] if bottom == "separate" else [self.towers]
        groups = [g for g in groups if g]
        self.group_of = {tower: i for i, group in enumerate(groups) for tower in group}
        self.encoders = nn.ModuleList(DeliveryEncoder(**sizes, emb_dim=emb_dim, graph=graph, conv=conv,
                                                      fanouts=fanouts, dropout=dropout) for _ in groups)
        in_dim = self.encoders[0].output_dim
        if bottom == "mmoe":
            self.bottoms = nn.ModuleList([MMoE(in_dim, len(self.towers), n_experts, expert_hidden, expert_dim, dropout)])
        else:
            layers = 3 if bottom == "shared" else 2
            self.bottoms = nn.ModuleList(
                nn.Sequential(MLP(in_dim, [expert_dim] * (layers - 1), out_dim=expert_dim, dropout=dropout), nn.ReLU())
                for _ in groups)
        self.bottom = bottom
        self.heads = nn.ModuleDict({t: MLP(expert_dim, tower_hidden, dropout=dropout) for t in self.towers})
        fields = ("user", "fund", "context")
        self.wide = WideTerm([c for f in fields for c in sizes[f"{f}_cardinalities"]],
                             sum(sizes[f"{f}_numeric"] for f in fields),
                             {t: WIDE_TARGETS[t] for t in self.towers if t in WIDE_TARGETS}, wide, wide_l2)

    @torch.no_grad()
    def init_amount(self, start: AmountStart) -> None:
        """Start the amount towers at the training rows' log amounts: μ at the mean and σ at the spread of v over
        the converted rows, v̂ at the mean of v over all rows. From a zero start, μ would spend many epochs
        climbing to amounts of e^7 while σ inflated to cover the gap."""
        if self.amount == "lognormal" and start.converted > 1:
            self.heads["mu"].layers[-1].bias.fill_(start.mean)
            spread = max(start.spread - self.sigma_floor, 1e-3)
            self.heads["sigma"].layers[-1].bias.fill_(spread + float(torch.log(-torch.expm1(torch.tensor(-spread)))))
        elif self.amount == "mse":
            self.heads["v_hat"].layers[-1].bias.fill_(start.overall)

    def attach(self, inputs) -> ESDPM:
        for encoder in self.encoders:
            encoder.attach(inputs)
        return self

    def _tower_inputs(self, inputs: list[Tensor]) -> dict[str, Tensor]:
        if self.bottom == "mmoe":
            return dict(zip(self.towers, self.bottoms[0](inputs[0])))
        shared = [bottom(e) for e, bottom in zip(inputs, self.bottoms)]
        return {tower: shared[self.group_of[tower]] for tower in self.towers}

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        return self._outputs([encoder(batch) for encoder in self.encoders], self.wide_inputs(batch))

    def wide_inputs(self, batch: dict[str, Tensor]) -> dict[str, Tensor] | None:
        """The wide term's ``cat`` and ``num``: the deliveries' user, fund and context fields side by side."""
        if not self.wide.targets:
            return None
        encoder = self.encoders[0]
        user, fund = encoder._batch_features(batch, "user"), encoder._batch_features(batch, "fund")
        return {"cat": torch.cat([user["cat"], fund["cat"], batch["ctx_cat"]], dim=1),
                "num": torch.cat([user["num"], fund["num"], batch["ctx_num"]], dim=1)}

    @torch.no_grad()
    def pair_outputs(self, user: Tensor, seq: Tensor, ctx_cat: Tensor, ctx_num: Tensor, n_funds: int
                     ) -> dict[str, Tensor]:
        """Outputs of every user (``user``, ``seq``: one row each) × fund × context row (``ctx_cat``, ``ctx_num``),
        ordered user-major, then fund, then context. The user's part of e (features, behaviours, graph) is computed
        once per user, not once per pair: scoring a population on k funds costs one sequence encoding per user."""
        n_users, n_contexts = len(user), len(ctx_cat)
        fund = torch.arange(n_funds).repeat_interleave(n_contexts)
        inputs, wide = [], None
        if self.wide.targets:
            pairs = {f"user_{k}": v.repeat_interleave(n_funds * n_contexts, dim=0)
                     for k, v in self.encoders[0].node_features("user", user).items()}
            pairs.update({f"fund_{k}": v.repeat(n_users, 1)
                          for k, v in self.encoders[0].node_features("fund", fund).items()})
            wide = self.wide_inputs({**pairs, "ctx_cat": ctx_cat.repeat(n_users * n_funds, 1),
                                     "ctx_num": ctx_num.repeat(n_users * n_funds, 1)})
        for encoder in self.encoders:
            users = encoder.user_part(encoder.node_features("user", user), seq, user)
            users = users.repeat_interleave(n_funds * n_contexts, dim=0)
            items = encoder.item_part(encoder.node_features("fund", fund), ctx_cat.repeat(n_funds, 1),
                                      ctx_num.repeat(n_funds, 1))
            inputs.append(torch.cat([users, items.repeat(n_users, 1)], dim=1))
        return self._outputs(inputs, wide)

    def _outputs(self, inputs: list[Tensor], wide: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
        x = self._tower_inputs(inputs)
        logit = {tower: self.heads[tower](x[tower]).squeeze(1) for tower in self.towers}
        if wide is not None:
            logit = self.wide(logit, wide)
        out = {}
        if self.conversion == "esmm":
            out["log_p"] = F.logsigmoid(logit["ctr"]) + F.logsigmoid(logit["cvr"])
            out["log_1mp"] = log1mexp(out["log_p"])
            out["p_ctr"], out["p_cvr"] = torch.sigmoid(logit["ctr"]), torch.sigmoid(logit["cvr"])
            out["log_ctr"], out["log_1m_ctr"] = F.logsigmoid(logit["ctr"]), F.logsigmoid(-logit["ctr"])
        else:
            out["log_p"], out["log_1mp"] = F.logsigmoid(logit["ctcvr"]), F.logsigmoid(-logit["ctcvr"])
        out["p_ctcvr"] = out["log_p"].exp()
        if self.amount == "lognormal":
            out["mu"], out["sigma"] = logit["mu"], self.sigma_floor + F.softplus(logit["sigma"])
            out["etv"] = expected_value(out["log_p"], out["mu"], out["sigma"])
        elif self.amount == "mse":
            out["v_hat"] = logit["v_hat"]
            out["etv"] = torch.expm1(out["v_hat"]).clamp_min(0.0)
        else:
            out["etv"] = out["p_ctcvr"]
        return out

    def loss(self, out: dict[str, Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        parts = {}
        if self.conversion == "esmm":
            parts["ctr"] = binary_nll(out["log_ctr"], out["log_1m_ctr"], batch["click"])
        if self.amount == "lognormal":
            parts["amount"] = self.amount_loss(out["log_p"], out["log_1mp"], out["mu"], out["sigma"], batch["v"],
                                               batch["convert"])
        else:
            parts["ctcvr"] = binary_nll(out["log_p"], out["log_1mp"], batch["convert"])
        if self.amount == "mse":
            parts["mse"] = ((out["v_hat"] - batch["v"]) ** 2).mean()
        total = sum(parts.values())
        return total, {k: v.detach() for k, v in parts.items()}
