"""MCM: GMCM without the graph, the micro-behaviour ablations MCM-2 and MCM-10 of GMCM's Figure 5."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from promokit.conversion.models.gmcm import GMCM


class MCM(GMCM):
    r"""GMCM's towers, node embeddings and losses (eqs. 9–14, 16, 18–19) with no GCN: the node embeddings are
    concatenated to predict the CVR, so neither the correlation of the micro-behaviours nor their order is used
    (section 5.6). ``keep`` limits the nodes to the first ``keep`` declared micro-behaviours (MCM-2: cart and
    favourite, the two most accessible; declare them first) or to the named ones; ``None`` keeps all (MCM-10).

    Paper: the MCM-2 and MCM-10 ablations of §5.6 and Figure 5 of "GMCM: Graph-based Micro-behavior Conversion
    Model for Post-click Conversion Rate Estimation"
    ([Bao et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401425)): "all the node embedding is simply
    concatenated to predict the CVR", i.e. eq. (17) with the node embeddings of eq. (14) in place of H^GCN and
    f_output the concatenation,

    .. math::
        \hat r^{CVR} = \mathrm{sigmoid}\big([\mathbf e_1 \,\|\, \dots \,\|\, \mathbf e_N]\, \Theta_{CVR}\big), \qquad
        \hat r_i^{node} = \mathrm{sigmoid}(\mathbf e_i \Theta_i) \quad (16)

    Args:
        cardinalities: rows per categorical field of ``batch["cat"]``.
        n_numeric: width D of ``batch["num"]``.
        nodes: the declared micro-behaviours, in the order of ``batch["micro"]``.
        pmg (numpy.ndarray): the ``(N, N)`` prior P (unused: there is no graph; kept for GMCM's signature).
        keep: how many of the first declared nodes, or which named nodes, to keep; ``None``: all.
        **params (Any): GMCM's other parameters (``output`` is always ``"concat"``; ``gcn_hidden`` is unused).

    Shapes:
        - **input:** ``batch["cat"]`` ``(B, F)`` int64, ``batch["num"]`` ``(B, D)``; for :meth:`loss` also
          ``batch["click"]``, ``batch["purchase"]`` ``(B,)`` and ``batch["micro"]`` ``(B, N)`` (all declared nodes)
        - **output:** ``p_ctr``, ``p_cvr``, ``p_ctcvr`` ``(B,)`` each and ``p_node`` ``(B, N_kept)``
    """

    def __init__(self, cardinalities: Sequence[int], n_numeric: int, nodes: Sequence[str], pmg,
                 keep: int | Sequence[str] | None = None, **params):
        self.kept = _kept(list(nodes), keep)
        super().__init__(cardinalities, n_numeric, [nodes[i] for i in self.kept], pmg, output="concat", **params)

    def _build_mixer(self, node_dim: int, hidden: Sequence[int], pmg) -> int:
        return node_dim

    def mix(self, e: Tensor) -> Tensor:
        return e

    def loss(self, out: dict[str, Tensor], batch: dict[str, Tensor]):
        return super().loss(out, {**batch, "micro": batch["micro"][:, self.kept]})


def _kept(nodes: list[str], keep) -> list[int]:
    if keep is None:
        return list(range(len(nodes)))
    if isinstance(keep, int):
        if not 1 <= keep <= len(nodes):
            raise ValueError(f"keep must be between 1 and the {len(nodes)} declared micro-behaviours, got {keep}")
        return list(range(keep))
    missing = [name for name in keep if name not in nodes]
    if missing:
        raise ValueError(f"micro-behaviours {missing} are not among the declared {nodes}")
    return [nodes.index(name) for name in keep]
