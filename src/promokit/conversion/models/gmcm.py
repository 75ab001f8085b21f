"""GMCM: Graph-based Micro-behaviour Conversion Model (Bao et al., SIGIR 2020)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from promokit.conversion.contract import wide_targets
from promokit.nn import MLP, WIDE_L2, FeatureEmbedding, WideTerm, binary_log_loss
from promokit.nn.gcn import DenseGCN, LearnableAdjacency
from promokit.nn.losses import log_loss_terms
from promokit.nn.nodes import PerNodeLinear

OUTPUT_FUNCTIONS = ("concat", "sum", "mean")


class GMCM(nn.Module):
    r"""CTR and graph-based CVR networks over one shared embedding (Figure 4).

    - shared embedding of every feature (eqs. 9–10);
    - CTR tower, leaky ReLU MLP → :math:`\hat r^{CTR}` (eqs. 11–12);
    - CVR tower, leaky ReLU MLP → :math:`H^{MLP}` (eq. 13), one embedding per micro-behaviour node
      :math:`e_i = \sigma(H^{MLP} \Theta_i)` (eq. 14);
    - GCN layers on the PMG, :math:`H_l = \sigma(\hat A H_{l-1} \Theta_l)`, :math:`A = P + B` with the
      concurrence prior ``P`` and a learnable edge bias ``B`` (eq. 15);
    - node probabilities :math:`\hat r_i^{node} = \mathrm{sigmoid}(h_i \Theta_i)` (eq. 16) and
      :math:`\hat r^{CVR} = \mathrm{sigmoid}(f_{output}(H) \Theta)` with ``output`` concat, sum or mean (eq. 17);
    - loss :math:`L^{CTR} + L^{PMG}` (eq. 19), where eq. 18 weights each clicked row's CVR logloss plus its mean
      node logloss by :math:`1/\hat r^{CTR}`, self-normalised over the batch's clicked rows (the paper's remedy
      for unstable inverse propensities) with :math:`\hat r^{CTR}` detached: the propensity weights the CVR task,
      it is not trained by it. Micro-behaviours and purchases are observed only after a click, so unclicked rows
      enter through :math:`L^{CTR}` alone. ``ipw=False`` weights every clicked row alike (the IPW ablation: the
      plain mean over the clicked rows).

    ``nodes`` names the micro-behaviours (label columns, never inputs) and ``pmg`` is their ``(N, N)`` prior ``P``
    from the clicked training rows (:func:`promokit.conversion.pmg.concurrence_probability`). Batch normalisation
    in both towers follows section 5.4. Outputs ``p_ctr``, ``p_cvr``, ``p_ctcvr`` (= p_ctr·p_cvr) and ``p_node``
    ``(B, N)`` in the order of :attr:`nodes`.
    ``wide`` adds the ``lr`` floor's linear term to the CTR and CVR logits, not the nodes'
    (:class:`~promokit.nn.WideTerm`: ``"none"``, ``"joint"`` or ``"offset"``; ``wide_l2`` is the joint term's decay).

    Paper: "GMCM: Graph-based Micro-behavior Conversion Model for Post-click Conversion Rate Estimation" (Bao, Wen,
    Li, Liu, Lin, Yang; SIGIR 2020; https://doi.org/10.1145/3397271.3401425), §4:

    .. math::
        H_l^{GCN} = \sigma\big(\tilde D^{-1/2} \tilde A \tilde D^{-1/2} H_{l-1}^{GCN} \Theta_l^{GCN}\big) \quad (15),
        \qquad \hat r^{CVR} = \mathrm{sigmoid}\big(f_{output}(H^{GCN})\, \Theta^{GCN\text{-}logit}_{CVR}\big) \quad (17)

    .. math::
        L^{PMG} = \frac{1}{B} \sum_{i=1}^{B} \frac{1}{\hat r_i^{CTR}} \Big(l(y_i^{CVR}, \hat r_i^{CVR})
        + \frac{1}{N} \sum_{j=1}^{N} l(y_{ij}^{node}, \hat r_{ij}^{node})\Big) \quad (18), \qquad
        L^{GMCM} = L^{CTR} + L^{PMG} \quad (19)

    Args:
        cardinalities: rows per categorical field of ``batch["cat"]``.
        n_numeric: width D of ``batch["num"]``.
        nodes: the micro-behaviours' names, the N nodes of the PMG, in the order of ``batch["micro"]``.
        pmg (numpy.ndarray): the prior P, an ``(N, N)`` concurrence probability matrix.
        emb_dim: embedding size per categorical field.
        ctr_hidden: the CTR tower's widths (§5.4.2: (512, 256, 128, 64)).
        cvr_hidden: the CVR tower's MLP widths before the node embedding (§5.4.2: (512, 256, 128)).
        node_dim: the node embedding width d_node of eq. (14) (§5.4.2: 64).
        gcn_hidden: the widths of the GCN layers (§5.4.2: two layers of 64).
        output: f_output of eq. (17), ``"concat"``, ``"sum"`` or ``"mean"``.
        dropout: dropout after each hidden layer of the towers.
        batch_norm: batch normalisation in the towers.
        ipw: weight the CVR and node losses by 1 / r̂^CTR (eq. 18); False: the plain mean over clicked rows.
        sparse: sparse embedding gradients.
        oov_dropout: probability of replacing a training code by the OOV slot.
        wide: the wide term's mode, ``"none"``, ``"joint"`` or ``"offset"``.
        wide_l2: the joint wide term's decay.

    Shapes:
        - **input:** ``batch["cat"]`` ``(B, F)`` int64, ``batch["num"]`` ``(B, D)``; for :meth:`loss` also
          ``batch["click"]``, ``batch["purchase"]`` ``(B,)`` and ``batch["micro"]`` ``(B, N)``
        - **output:** ``p_ctr``, ``p_cvr``, ``p_ctcvr`` ``(B,)`` each and ``p_node`` ``(B, N)``
    """

    labels = ("click", "purchase", "micro")
    outputs = ("p_ctr", "p_cvr", "p_ctcvr", "p_node")

    def __init__(self, cardinalities: Sequence[int], n_numeric: int, nodes: Sequence[str], pmg,
                 emb_dim: int = 16, ctr_hidden: Sequence[int] = (512, 256, 128, 64),
                 cvr_hidden: Sequence[int] = (512, 256, 128), node_dim: int = 64, gcn_hidden: Sequence[int] = (64, 64),
                 output: str = "concat", dropout: float = 0.0, batch_norm: bool = True, ipw: bool = True,
                 sparse: bool = True, oov_dropout: float = 0.0, wide: str = "none", wide_l2: float = WIDE_L2):
        super().__init__()
        if output not in OUTPUT_FUNCTIONS:
            raise ValueError(f"output must be one of {OUTPUT_FUNCTIONS}, got {output!r}")
        self.nodes = list(nodes)
        if not self.nodes:
            raise ValueError("GMCM needs at least one micro-behaviour node")
        self.output, self.ipw = output, ipw
        tower = {"dropout": dropout, "activation": "leaky_relu", "batch_norm": batch_norm}
        self.sem = FeatureEmbedding(cardinalities, n_numeric, emb_dim, sparse=sparse, oov_dropout=oov_dropout)
        self.ctr = MLP(self.sem.output_dim, ctr_hidden, **tower)
        self.cvr = MLP(self.sem.output_dim, cvr_hidden, out_dim=None, **tower)
        self.node_embedding = PerNodeLinear(self.cvr.out_dim, len(self.nodes), node_dim)
        width = self._build_mixer(node_dim, gcn_hidden, pmg)
        self.node_logit = PerNodeLinear(width, len(self.nodes), 1)
        self.cvr_logit = nn.Linear(width * len(self.nodes) if output == "concat" else width, 1)
        self.wide = WideTerm(cardinalities, n_numeric, wide_targets("ctr", "cvr"), wide, wide_l2)

    def pool(self, h: Tensor) -> Tensor:
        """f_output of eq. 17 over the nodes' representations ``(B, N, width)``."""
        return h.flatten(1) if self.output == "concat" else h.sum(1) if self.output == "sum" else h.mean(1)

    def _build_mixer(self, node_dim: int, hidden: Sequence[int], pmg) -> int:
        """The layers between the node embeddings and the logits (eq. 15's GCN); returns their output width."""
        self.adjacency = LearnableAdjacency(pmg)
        widths = [node_dim, *hidden]
        self.gcn = nn.ModuleList(DenseGCN(a, b) for a, b in zip(widths[:-1], widths[1:]))
        return widths[-1]

    def mix(self, e: Tensor) -> Tensor:
        adjacency = self.adjacency()
        for layer in self.gcn:
            e = nn.functional.leaky_relu(layer(e, adjacency))
        return e

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        g = self.sem(batch)
        e = nn.functional.leaky_relu(self.node_embedding(self.cvr(g)))
        h = self.mix(e)
        z = self.wide({"ctr": self.ctr(g).squeeze(1), "cvr": self.cvr_logit(self.pool(h)).squeeze(1)}, batch)
        p_ctr, p_cvr = torch.sigmoid(z["ctr"]), torch.sigmoid(z["cvr"])
        p_node = torch.sigmoid(self.node_logit(h)).squeeze(2)
        return {"p_ctr": p_ctr, "p_cvr": p_cvr, "p_ctcvr": p_ctr * p_cvr, "p_node": p_node}

    def loss(self, out: dict[str, Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        click = batch["click"]
        # eq. 18's weights, 0 off the clicks
        weight = click / out["p_ctr"].detach().clamp_min(1e-6) if self.ipw else click
        node_terms = log_loss_terms(out["p_node"], batch["micro"]).mean(1)
        parts = {"ctr": binary_log_loss(out["p_ctr"], click),
                 "cvr": binary_log_loss(out["p_cvr"], batch["purchase"], weight),
                 "node": (node_terms * weight).sum() / weight.sum().clamp_min(1.0)}
        total = parts["ctr"] + parts["cvr"] + parts["node"]  # eq. 19: L_CTR + L_PMG, L_PMG = cvr + node
        return total, {k: v.detach() for k, v in parts.items()}
