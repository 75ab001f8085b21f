"""DMBGN: Deep Multi-Behavior Graph Networks for voucher redemption rate prediction (Xiao et al., KDD 2021)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch
from torch_geometric.nn import GraphConv, TopKPooling
from torch_geometric.utils import scatter

from promokit.data import DataError
from promokit.nn import MLP, WIDE_L2, AttentionUnit, FeatureEmbedding, FieldEmbedding, binary_log_loss, drop_to_oov
from promokit.nn.losses import EPS
from promokit.training.device import net_device, to_device
from promokit.voucher.graph import UVGStore
from promokit.voucher.models.base import FieldLayout, RedeemModel

ENCODERS = ("gnn", "avg")
HISTORY_POOLINGS = ("attention", "avg")


@dataclass
class UVGEmbedding:
    """Per graph: ``e`` = e_b ‖ e_o (eq. 4), ``behaviour`` e_b (eq. 3), ``voucher`` e_o, ``score`` s_UVG (eq. 5)."""

    e: Tensor
    behaviour: Tensor
    voucher: Tensor
    score: Tensor

    def take(self, index: Tensor) -> UVGEmbedding:
        return UVGEmbedding(self.e[index], self.behaviour[index], self.voucher[index], self.score[index])


class UVGEncoder(nn.Module):
    r"""UVG → embedding and score (DMBGN section 3.4).

    Node features f⁽⁰⁾ come from separate embedding layers: an item node embeds its item id and the store's
    ``item_features`` (category, price level …) and, in a ``scoped`` store, whether the voucher applies to it, the
    voucher node embeds (voucher/activity id, min_spend, discount); each is projected to ``dim``.

    ``encoder="gnn"``: ``layers`` Higher-order GNN layers, eq. (1),
    :math:`f^{(l)}(v) = \sigma(f^{(l-1)}(v) W_1 + \sum_{w \in N(v)} f^{(l-1)}(w) W_2)` (PyG ``GraphConv``,
    sigmoid), then ``TopKPooling(ratio)`` (equal scores ranked by node position: :func:`_top_k`). Pooling may drop
    any node, the voucher's included, so e_o is the voucher node's embedding *before* pooling; the sub-groups of
    eq. (2) use the item nodes that survive it.
    ``encoder="avg"``: the paper's DMBGN-AvgPooling: no message passing, each zone is the plain average of its
    item embeddings f⁽⁰⁾.

    Eq. (2): e_g = avg ‖ max over the nodes of zone g (avg only for ``"avg"``), zeros for an empty zone;
    eq. (3): e_b = MLP(e_atc_pre ‖ e_ord_pre ‖ e_atc_post ‖ e_ord_post); eq. (4): e = e_b ‖ e_o;
    eq. (5): s = σ(e_b · e_o).

    ``item_embeddings`` (n_item_codes, k), indexed by the store's item codes, initialises the item-id table
    (pre-trained item embeddings, section 3.4.2, see :mod:`promokit.voucher.item_embedding`); ``freeze_items``
    keeps the table fixed. ``item_dim`` is the table's width (default ``emb_dim``, or k): a saved model is
    rebuilt with it and its weights bring the values, so the embeddings are not needed again. ``oov_dropout``
    trains the unknown rows of the voucher-id and item-id tables, which vouchers and items first seen after
    training get (see :class:`FieldEmbedding`).

    Paper: the DMBGN paper (Deep Multi-behavior Graph Networks for voucher redemption rate prediction,
    ``dmbgn-voucher-redemption.txt``; code https://github.com/fengtong-xiao/DMBGN), §3.4.1, eqs. (1)–(5):

    .. math::
        e_g = e_{g,avg} \,\|\, e_{g,max} \quad (2), \qquad
        e_{UVG,b} = \mathrm{MLP}(e_{atc\_pre} \,\|\, e_{ord\_pre} \,\|\, e_{atc\_post} \,\|\, e_{ord\_post}) \quad (3)

    .. math::
        e_{UVG} = e_{UVG,b} \,\|\, e_{UVG,o} \quad (4), \qquad
        s_{UVG} = \sigma(e_{UVG,b} \cdot e_{UVG,o}) \quad (5)

    Args:
        store: the UVGs, their zones, item features and voucher schema (:class:`UVGStore`).
        emb_dim: embedding size of the voucher id and of each item feature (and of the item id by default).
        dim: width of the node features f⁽ˡ⁾ and of e_b and e_o (the UVG embedding e is 2·dim).
        layers: number of Higher-order GNN layers (``"gnn"``).
        ratio: ``TopKPooling``'s ratio (§4.4: 0.9).
        encoder: ``"gnn"`` (eq. 1 and top-k pooling) or ``"avg"`` (DMBGN-AvgPooling).
        directed: message passing along the UVG's chronological edges only; False adds the reverse edges.
        sparse: sparse embedding gradients.
        item_embeddings: pre-trained item embeddings ``(n_item_codes, k)`` initialising the item-id table.
        freeze_items: keep the item-id table fixed.
        item_dim: the item-id table's width (default ``emb_dim``, or k with ``item_embeddings``).
        oov_dropout: probability of replacing a training voucher or item code by the OOV slot.

    Shapes:
        - **input:** a PyG ``Batch`` of G graphs with n nodes and E edges (:meth:`UVGStore.batch`): ``x``
          ``(n, 1 + n_item_features)`` int64, ``zone`` ``(n,)``, ``edge_index`` ``(2, E)``, ``batch`` ``(n,)``,
          ``voucher_index`` ``(G,)``, ``voucher`` ``(G,)``, ``schema`` ``(G, n_schema_columns)``
        - **output:** :class:`UVGEmbedding`: ``e`` ``(G, 2 * dim)``, ``behaviour`` and ``voucher`` ``(G, dim)``,
          ``score`` ``(G,)``
    """

    def __init__(self, store: UVGStore, emb_dim: int = 16, dim: int = 32, layers: int = 2, ratio: float = 0.9,
                 encoder: str = "gnn", directed: bool = True, sparse: bool = True,
                 item_embeddings: Tensor | None = None, freeze_items: bool = False, item_dim: int | None = None,
                 oov_dropout: float = 0.0):
        super().__init__()
        if encoder not in ENCODERS:
            raise DataError(f"encoder must be one of {ENCODERS}, got {encoder!r}")
        self.encoder, self.directed, self.n_zones, self.dim = encoder, directed, len(store.zones), dim
        self.freeze_items, self.oov_dropout = freeze_items, oov_dropout
        if item_embeddings is None:
            self.item = nn.Embedding(store.cardinality("item"), item_dim or emb_dim, sparse=sparse)
            nn.init.normal_(self.item.weight, std=0.05)
            self.item.weight.requires_grad_(not freeze_items)
        else:
            if item_embeddings.dim() != 2 or item_embeddings.shape[0] != store.cardinality("item"):
                raise DataError(f"item_embeddings has shape {tuple(item_embeddings.shape)}, the store has "
                                f"{store.cardinality('item')} item codes (OOV row 0 included)")
            if item_dim is not None and item_dim != item_embeddings.shape[1]:
                raise DataError(f"item_dim is {item_dim} but item_embeddings has {item_embeddings.shape[1]} columns")
            self.item = nn.Embedding.from_pretrained(item_embeddings.float().clone(), freeze=freeze_items,
                                                     sparse=sparse)
        self.item_side = FieldEmbedding(store.node_cardinalities, emb_dim,
                                        sparse=sparse)
        self.voucher_id = FieldEmbedding([store.cardinality("voucher")], emb_dim, sparse=sparse, oov_dropout=oov_dropout)
        self.item_in = nn.Linear(self.item.embedding_dim + self.item_side.output_dim, dim)
        self.voucher_in = nn.Linear(emb_dim + len(store.schema_columns), dim)
        self.convs = nn.ModuleList(GraphConv(dim, dim) for _ in range(layers if encoder == "gnn" else 0))
        self.pool = TopKPooling(dim, ratio=ratio) if encoder == "gnn" else None
        stats = 2 if encoder == "gnn" else 1
        self.behaviour = MLP(stats * dim * self.n_zones, (2 * dim,), out_dim=dim)

    @property
    def output_dim(self) -> int:
        return 2 * self.dim

    def node_features(self, graphs: Batch) -> Tensor:
        """f⁽⁰⁾ of every node: item projection, overwritten on voucher nodes by the voucher projection."""
        item_codes = drop_to_oov(graphs.x[:, 0], self.oov_dropout) if self.training else graphs.x[:, 0]
        items = self.item_in(torch.cat([self.item(item_codes), self.item_side(graphs.x[:, 1:])], dim=1))
        vouchers = self.voucher_in(torch.cat([self.voucher_id(graphs.voucher.unsqueeze(1)), graphs.schema], dim=1))
        return items.index_copy(0, graphs.voucher_index, vouchers)

    def forward(self, graphs: Batch) -> UVGEmbedding:
        n_graphs = graphs.num_graphs
        x, edge_index, batch, zone = self.node_features(graphs), graphs.edge_index, graphs.batch, graphs.zone
        if not self.directed:
            edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
        for conv in self.convs:
            x = torch.sigmoid(conv(x, edge_index))  # eq. (1)
        voucher = x[graphs.voucher_index]
        if self.pool is not None:
            x, kept = _top_k(self.pool, x, batch, n_graphs)
            batch, zone = batch[kept], zone[kept]
        is_item = zone >= 0
        group = (batch * self.n_zones + zone)[is_item]
        x = x[is_item]
        size = n_graphs * self.n_zones
        parts = [scatter(x, group, dim=0, dim_size=size, reduce="mean")]
        if self.encoder == "gnn":
            parts.append(scatter(x, group, dim=0, dim_size=size, reduce="max"))  # empty zone → 0
        groups = torch.cat([p.view(n_graphs, self.n_zones, -1) for p in parts], dim=2).flatten(1)  # eq. (2)
        behaviour = self.behaviour(groups)  # eq. (3)
        score = torch.sigmoid((behaviour * voucher).sum(dim=1))  # eq. (5)
        return UVGEmbedding(torch.cat([behaviour, voucher], dim=1), behaviour, voucher, score)


def _top_k(pool: TopKPooling, x: Tensor, batch: Tensor, n_graphs: int) -> tuple[Tensor, Tensor]:
    """``pool``'s selection: score y = tanh(x·p / ‖p‖), keep the k best nodes of each graph (k = ⌈ratio·n⌉ of its n
    nodes; a ratio ≥ 1 is k itself) scaled by y; returns them and their positions.

    As PyG's ``TopKPooling``, but equal scores (two nodes of one item with the same neighbours, say in different
    zones) are ranked by node position: PyG sorts unstably, so which of them survived depended on the other
    graphs of the batch, and a session scored differently alone and in a batch."""
    select = pool.select
    score = select.act((x * select.weight).sum(dim=-1) / select.weight.norm(p=2, dim=-1))
    count = torch.bincount(batch, minlength=n_graphs)
    ratio = select.ratio
    keep = torch.full_like(count, int(ratio)) if ratio >= 1 else (float(ratio) * count.to(x.dtype)).ceil().long()
    order = torch.sort(score, descending=True, stable=True).indices
    order = order[torch.sort(batch[order], stable=True).indices]  # by graph, best first, ties by position
    rank = torch.arange(len(order), device=x.device) - (torch.cumsum(count, 0) - count)[batch[order]]
    kept = order[rank < keep[batch[order]]]
    return x[kept] * score[kept].unsqueeze(1), kept


class DMBGN(RedeemModel):
    r"""DMBGN (Fig. 3): user profile embedding ‖ target UVG embedding ‖ attention over the user's last R
    redeemed historical UVGs (eq. 7) ‖ the history's UVG scores, into an MLP head → p_redeem.

    The target session is embedded from its pre-collection zones only (``store.target_zones``), so its own
    post-collection behaviour cannot leak the label; historical sessions use all zones (their outcome was known
    before the target's collection — ``batch["history"]`` must be built that way, see
    ``promokit.voucher.history``).

    Score pooling of the history: the R scores s_UVG (0 on padding) ‖ their mean over the real entries.

    Variants by parameter (paper section 5): ``encoder="avg"`` is DMBGN-AvgPooling (item-embedding averages,
    no GNN); ``pretrained`` (a state dict of :func:`promokit.voucher.pretrain.pretrain_uvg`) initialises the
    UVG encoder — the paper's DMBGN fine-tunes it, DMBGN-Pretrained (``freeze_pretrained=True``) keeps it
    fixed. ``history_pooling="avg"`` replaces the attention by the plain mean of the history UVGs.
    ``oov_dropout`` trains the unknown-id rows of the profile's id fields and of the UVG's voucher and item
    nodes, which unseen (cold-start) users, vouchers and items get at prediction time.

    Loss, eqs. (8)–(10): L = L_target + α·L_aux, L_aux = 1/N Σ_n 1/R_n Σ_r −log s_r over the real history
    entries (a sample without history adds 0).

    Batch keys: ``cat`` (B, F), ``num`` (B, D), ``session`` (B,) session row of the target, ``history``
    (B, R) session rows of the redeemed history (−1 = padding), ``redeemed`` (B,) for the loss.

    ``wide`` adds the ``lr`` floor's linear term to the logit (:class:`~promokit.nn.WideTerm`: ``"none"``,
    ``"joint"`` or ``"offset"``; ``wide_l2`` is the joint term's decay).

    The :class:`UVGStore` is attached, not registered: it is not part of ``state_dict``. After loading weights,
    :meth:`attach` the store of the tables to score, built with the training vocabulary
    (``UVGStore.build(tables, vocabulary=…)``), so that codes mean what they meant in training.

    Paper: the DMBGN paper (Deep Multi-behavior Graph Networks for voucher redemption rate prediction,
    ``dmbgn-voucher-redemption.txt``; code https://github.com/fengtong-xiao/DMBGN; the text has no title page),
    §3.3–3.6:

    .. math::
        w_r = \mathrm{AttentionUnit}(e^r_{UVG}, e^T_{UVG}, \phi), \qquad
        h_T = \sum_{r=1}^{R} w_r\, e^r_{UVG} \quad (7)

    .. math::
        L = L_{target} + \alpha L_{aux} \quad (10), \qquad
        L_{aux} = \frac{1}{N} \sum_{n=1}^{N} \Big(\frac{1}{R_n} \sum_{r=1}^{R_n} -\log s^r_{UVG}\Big) \quad (9)

    with L_target the logloss of eq. (8) and p_redeem = σ(MLP(profile ‖ e^T_UVG ‖ h_T ‖ scores)) (Fig. 3).

    Args:
        layout: where the id, profile and voucher columns sit in the batch (:class:`FieldLayout`).
        store: the UVGs of the sessions (:class:`UVGStore`), attached, not saved.
        emb_dim: embedding size per categorical field (§4.4: 16).
        uvg_dim: width of e_b and e_o (the UVG embedding e is 2·uvg_dim).
        gnn_layers: number of Higher-order GNN layers of eq. (1).
        ratio: ``TopKPooling``'s ratio (§4.4: 0.9).
        encoder: ``"gnn"``, or ``"avg"`` (DMBGN-AvgPooling).
        history_pooling: ``"attention"`` (eq. 7) or ``"avg"`` (the plain mean of the history UVGs).
        alpha: the trade-off coefficient α of eq. (10) (§4.4: 1.0).
        hidden: the MLP head's hidden widths (§4.4: (128, 64)).
        dropout: dropout after each hidden layer (§4.4: 0.5).
        attention_units: PReLU units of the attention network (§4.4: 64).
        history_len: the history's length R (§4.4: 6).
        directed: message passing along the UVG's chronological edges only.
        sparse: sparse embedding gradients.
        item_embeddings: pre-trained item embeddings ``(n_item_codes, k)`` (§3.4.2).
        freeze_items: keep the item-id table fixed.
        item_dim: the item-id table's width (default ``emb_dim``, or k with ``item_embeddings``).
        pretrained: a UVG encoder state dict from :func:`promokit.voucher.pretrain.pretrain_uvg` (eq. 6).
        freeze_pretrained: keep the pre-trained encoder fixed (DMBGN-Pretrained).
        oov_dropout: probability of replacing a training code by the OOV slot.
        wide: the wide term's mode, ``"none"``, ``"joint"`` or ``"offset"``.
        wide_l2: the joint wide term's decay.

    Shapes:
        - **input:** ``batch["cat"]`` ``(B, F)`` int64, ``batch["num"]`` ``(B, D)``, ``batch["session"]``
          ``(B,)``, ``batch["history"]`` ``(B, R)`` (−1 = padding); for :meth:`loss` also ``batch["redeemed"]``
          ``(B,)``
        - **output:** ``p_redeem`` ``(B,)``, ``s_uvg`` ``(B,)`` (the target's s_UVG), ``s_history`` ``(B, R)``
    """

    outputs = ("p_redeem", "s_uvg", "s_history")
    reads_history = True
    #: the batch keys the loss reads: the label, and which history entries are real (eq. 9)
    labels = ("redeemed", "history")

    def __init__(self, layout: FieldLayout, store: UVGStore, emb_dim: int = 16, uvg_dim: int = 32,
                 gnn_layers: int = 2, ratio: float = 0.9, encoder: str = "gnn", history_pooling: str = "attention",
                 alpha: float = 1.0, hidden: Sequence[int] = (128, 64), dropout: float = 0.5,
                 attention_units: int = 64, history_len: int = 6, directed: bool = True, sparse: bool = True,
                 item_embeddings: Tensor | None = None, freeze_items: bool = False, item_dim: int | None = None,
                 pretrained: dict[str, Tensor] | None = None, freeze_pretrained: bool = False,
                 oov_dropout: float = 0.0, wide: str = "none", wide_l2: float = WIDE_L2):
        super().__init__()
        if history_pooling not in HISTORY_POOLINGS:
            raise DataError(f"history_pooling must be one of {HISTORY_POOLINGS}, got {history_pooling!r}")
        self.store = store
        self.alpha, self.history_pooling, self.history_len = alpha, history_pooling, history_len
        self.input = FeatureEmbedding(layout.cardinalities, layout.n_numeric, emb_dim, sparse=sparse,
                                      oov_dropout=oov_dropout)
        self.uvg = UVGEncoder(store, emb_dim, uvg_dim, gnn_layers, ratio, encoder, directed, sparse,
                              item_embeddings, freeze_items, item_dim=item_dim, oov_dropout=oov_dropout)
        width = self.uvg.output_dim
        self.attention = AttentionUnit(width, attention_units) if history_pooling == "attention" else None
        self.mlp = MLP(self.input.output_dim + 2 * width + history_len + 1, hidden, dropout=dropout)
        self.with_wide(layout, wide, wide_l2)
        if pretrained is not None:
            self.load_pretrained(pretrained, freeze=freeze_pretrained)

    def attach(self, store: UVGStore) -> DMBGN:
        self.store = store
        return self

    def load_pretrained(self, state: dict[str, Tensor], freeze: bool = False) -> None:
        """Load the UVG encoder's pre-trained weights (voucher and item embeddings, GNN, eq. 3 MLP); frozen item
        embeddings (``freeze_items``) stay frozen."""
        self.uvg.load_state_dict(state)
        for parameter in self.uvg.parameters():
            parameter.requires_grad_(not freeze)
        if self.uvg.freeze_items:
            self.uvg.item.weight.requires_grad_(False)

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        history = batch["history"]
        if history.shape[1] != self.history_len:
            raise DataError(f"history has {history.shape[1]} columns, the model was built for {self.history_len}")
        target = self._embed(batch["session"], self.store.target_zones)
        mask = history >= 0
        hist_e = target.e.new_zeros(*history.shape, target.e.shape[1])
        hist_s = target.e.new_zeros(history.shape)
        if mask.any():
            past = self._embed(history[mask])
            hist_e = hist_e.index_put((mask,), past.e)
            hist_s = hist_s.index_put((mask,), past.score)
        count = mask.sum(dim=1, keepdim=True).clamp_min(1)
        if self.attention is not None:
            pooled = self.attention(hist_e, target.e, mask)  # eq. (7)
        else:
            pooled = hist_e.sum(dim=1) / count
        scores = torch.cat([hist_s, hist_s.sum(dim=1, keepdim=True) / count], dim=1)
        logit = self.mlp(torch.cat([self.input(batch), target.e, pooled, scores], dim=1)).squeeze(1)
        logit = self.add_wide(logit, batch)
        return {"p_redeem": torch.sigmoid(logit), "s_uvg": target.score, "s_history": hist_s}

    def _embed(self, rows: Tensor, zones: tuple[str, ...] | None = None) -> UVGEmbedding:
        """The UVGs of session ``rows``, each distinct graph run through the encoder once (a history session recurs
        in many later sessions of its user; without a behaviour log every session of a voucher shares its graph)."""
        first, position = self.store.distinct(rows)
        device = net_device(self)
        return self.uvg(to_device(self.store.batch(first, zones), device)).take(position.to(device))

    def loss(self, out: dict[str, Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        target = binary_log_loss(out["p_redeem"], batch["redeemed"])  # eq. (8)
        aux = aux_loss(out["s_history"], batch["history"] >= 0)  # eq. (9)
        total = target + self.alpha * aux  # eq. (10)
        return total, {"redeem": target.detach(), "aux": aux.detach()}


def aux_loss(scores: Tensor, mask: Tensor) -> Tensor:
    """Eq. (9): 1/N Σ_n (1/R_n) Σ_{r ≤ R_n} −log s_r, over the real (``mask``) history entries only."""
    terms = -scores.clamp_min(EPS).log() * mask
    per_sample = terms.sum(dim=1) / mask.sum(dim=1).clamp_min(1)
    return per_sample.mean()
