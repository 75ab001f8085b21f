"""The options of ``promokit incentive …`` (typer's annotated types) and the flags named in the library's errors: a
module without torch, so ``--help`` loads no model. The commands are :mod:`promokit.cli.incentive`; the options
every domain shares are in :mod:`promokit.cli.options.common`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.cli.options import common as co
from promokit.incentive.defaults import DEFAULT_TRAIN

CustomersOpt = Annotated[Path, typer.Option("--customers", help=f"customers table ({co.TABLE_HELP}): customer_id, level, redeemed, features.")]
MerchantsOpt = Annotated[Optional[Path], typer.Option("--merchants", help=f"merchants table ({co.TABLE_HELP}): merchant_id, level, shares, prior_shares, features. Leave out with --edges for an experiment with customers only (lr, dnn, dnn-h).")]
EdgesOpt = Annotated[Optional[Path], typer.Option("--edges", help=f"edges table ({co.TABLE_HELP}): customer_id, merchant_id[, weight, edge features]. Leave out with --merchants for customers only.")]
ItemsOpt = Annotated[Optional[Path], typer.Option("--items", help=f"items table ({co.TABLE_HELP}): item_id, features; with --item-edges (left out: the items are the ids of --item-edges).")]
ItemEdgesOpt = Annotated[Optional[Path], typer.Option("--item-edges", help=f"customer–item edges table ({co.TABLE_HELP}): customer_id, item_id[, weight, edge features]: the graph of the GNN models instead of --merchants and --edges.")]
CustomerEdgesOpt = Annotated[Optional[Path], typer.Option("--customer-edges", help=f"customer–customer edges table ({co.TABLE_HELP}): customer_id, neighbour_id[, weight, edge features], undirected: the graph of the GNN models instead of --merchants and --edges.")]
RecalibrateByOpt = Annotated[Optional[str], typer.Option("--by", help="level: one map per offered value, shrunk toward the overall map where a value was offered to few customers, each applied at its own value; values offered to none get the overall map (default: one map for every value).")]
LevelsOpt = Annotated[Optional[str], typer.Option("--levels", help="The value list R, comma-separated (default: the levels in the tables).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for the split, initialisation, sampling and shuffling.")]
ModelOpt = Annotated[str, typer.Option("--model", help="gnn-hazard | lr | dnn | dnn-h | sbbm | cox | dssm-c | auto (the better of lr, gnn-hazard on validation)")]
ModelDirOpt = Annotated[Path, typer.Option("--model", help="Model directory written by train.")]
RatioOpt = Annotated[Optional[float], typer.Option("--ratio", help="Budget B of eq. 16: expected incentive per expected response (default: the median value).")]
MonitorOpt = Annotated[Optional[str], typer.Option("--monitor", help="What picks the epoch on the validation nodes: customer_loglik | auc_c | loss (eq. 7, merchants included).", show_default=DEFAULT_TRAIN.monitor)]
LrDecayOpt = Annotated[Optional[float], typer.Option("--lr-decay", help="Learning rate multiplied by this each epoch (section 5: 0.95).", show_default=f"{DEFAULT_TRAIN.lr_decay:g}")]
#: The library's arguments that options give, named as those options in its errors.
FLAGS = {**co.VALIDATION_FLAG, "truth": "--truth", "allow_leaky": "--allow-leaky", "method": "--method",
         "by": "--by"}

#: The label roles of the node tables (promokit.incentive.contract.LABELS).
LABEL_ROLES = ("redeemed", "level", "shares", "prior_shares")
LabelOpt = co.label_option(LABEL_ROLES)
AllowLeakyOpt = co.allow_leaky_option("customer feature columns", "the response")
MethodOpt = co.recalibration_method_option("the response at the offered value (one map for every value)")
TestFractionOpt = co.test_fraction_option("of the labelled customers and of the merchants, drawn at random with --seed; "
                                       "section 5 of the paper: 0.15")


def levels_option(text: Optional[str]):
    """``--levels``: the value list as numbers (None: the levels in the tables), or a one-line error."""
    from promokit.data import DataError

    if text is None:
        return None
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise DataError(f"--levels must be comma-separated numbers, got {text!r}") from None


def graph_files(customers: Path, merchants: Optional[Path], edges: Optional[Path], items: Optional[Path] = None,
                item_edges: Optional[Path] = None, customer_edges: Optional[Path] = None) -> dict[str, Optional[Path]]:
    """The graph's table files by name, as the library reads them."""
    return {"customers": customers, "merchants": merchants, "edges": edges, "items": items, "item_edges": item_edges,
            "customer_edges": customer_edges}
