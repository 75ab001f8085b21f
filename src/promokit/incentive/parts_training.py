"""Training an incentive GNN on a graph in parts (``incentive train --customers DIR --edges DIR --merchants FILE|DIR
--executor local|ray``), as AGL trains (Zhang et al., VLDB 2020): no process ever holds the graph.

1. **scan**: each customer and merchant part's integer columns (:func:`~promokit.training.shards.integer_levels`)
   and offered values. The driver infers the feature columns on the first parts
   (:func:`~promokit.incentive.contract.check_tables`), classifies the integer columns as on the parts'
   concatenation (:func:`~promokit.training.shards.classify_integers`) and takes the value list of every part;
2. **records** (:func:`~promokit.incentive.records.write_records`): the graph in shards, the input encoders fitted
   from the shards' counts (:func:`~promokit.incentive.records.fit_encoders`), each labelled customer's and
   merchant's role drawn from its id (:func:`~promokit.incentive.estimator.hashed_roles`, the fractions
   :meth:`IncentiveModel.fit` holds out, though not its draw), then the training nodes' neighbourhoods in ``draws``
   draws and the validation nodes' in one, none for the test nodes (with the model's ``refit``: every node's in
   ``draws`` draws);
3. **train** (:func:`~promokit.incentive.record_training.fit_from_records`) on the executor: in this process, or
   data-parallel on Ray Train;
4. **refit** (with the model's ``refit``, the default, and nodes held out): the network trained again from its
   initial weights on the records of every labelled customer and merchant, training, validation and test, for the
   epochs the selection kept (:func:`~promokit.training.refit.refit_after_selection`), on the same executor. The
   held-out nodes are not scored before it (the graph is never read whole), so no held-out metrics are kept:
   ``refit=False`` keeps the selected model, which ``evaluate`` then scores on them.

The loss is eq. 7's, both terms where the merchants are labelled (else the customer term, and the merchants' f_m
is NaN: :attr:`IncentiveModel.merchants_trained`). The model saves, predicts (one table or in parts) and evaluates as
one trained on a table; its held-out nodes are those whose role is test (:meth:`IncentiveModel.held_out`).
"""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.io import write_json
from promokit.data.parts import list_parts, naming, read_part
from promokit.data.spec import FeatureSpec
from promokit.data.uris import local_dir
from promokit.incentive.contract import CUSTOMER, LEVEL, MERCHANT, MERCHANT_LABELS, REDEEMED, check_tables
from promokit.incentive.estimator import HASHED, FitReport, IncentiveModel, validation_fraction
from promokit.incentive.inputs import InputEncoders
from promokit.incentive.parts import check_paired
from promokit.incentive.record_training import fit_from_records
from promokit.incentive.records import ROLES, RecordSpec, write_records
from promokit.training.refit import refit_after_selection
from promokit.training.shard_loop import checkpoint_folder
from promokit.training.shards import classify_integers, first_with_rows, integer_levels

#: the customers' contract columns, which are no features
CUSTOMER_CONTRACT = (CUSTOMER, LEVEL, REDEEMED)


#: What :func:`write_training_records` leaves beside the records: a process that trains from them needs nothing else.
RECORDS_ARTIFACT = "records.json"


def train_parts(model: IncentiveModel, customers, merchants, edges, scratch: str | os.PathLike, executor, *,
                levels=None, types: dict[str, str] | None = None, validation: float | None = None, draws: int = 1,
                checkpoint_dir: str | os.PathLike | None = None, resume: bool = False) -> dict:
    """Fit ``model`` (a ``gnn`` model) on the graph whose ``customers`` and co-partitioned ``edges`` are parts and
    whose ``merchants`` are one table or parts (module docstring), on ``executor``: its records written to
    ``scratch`` (local, removed by the caller) by :func:`write_training_records` (``levels``, ``types``,
    ``validation`` and ``draws`` as it takes them), then trained from them and, with the model's ``refit``, refit on
    every labelled node (module docstring, steps 3 and 4). ``checkpoint_dir`` is local (a URI is a one-line error).
    Returns the counts (graph, seeds per role, records and their bytes)."""
    checkpoint_dir = checkpoint_folder(checkpoint_dir)
    scratch = local_dir(scratch, "scratch")
    written = write_training_records(model, customers, merchants, edges, scratch, executor, levels=levels,
                                     types=types, validation=validation, draws=draws)
    seeds, valid_fraction = written["seeds"], validation_fraction(validation)
    test_fraction = model.test_fraction
    held = test_fraction or valid_fraction
    fit_from_records(model, scratch / "train" if held else scratch, scratch / "valid" if seeds["valid"] else None,
                     executor=executor, checkpoint_dir=checkpoint_dir, resume=resume)
    model.test_fraction = test_fraction
    trained = model.merchants_trained
    model.holdout_ = {"rule": HASHED, "test_fraction": float(test_fraction), "valid_fraction": valid_fraction,
                      "seed": model.train_config.seed, "rows": sum(seeds.values()), "held_out": seeds["test"],
                      "merchants": written["merchants"] if trained else None,
                      "held_out_merchants": written["merchant_seeds"]["test"] if trained else 0,
                      "merchants_trained": trained}
    model.report_ = FitReport(seeds["train"], seeds["valid"], seeds["test"])
    refit_after_selection(model, None, None, fit=partial(_fit_on_every_record, model, scratch, executor))
    return written


def write_training_records(model: IncentiveModel, customers, merchants, edges, out: str | os.PathLike, executor, *,
                           levels=None, types: dict[str, str] | None = None, validation: float | None = None,
                           draws: int = 1) -> dict:
    """Steps 1 and 2 of the module docstring for ``model`` (a ``gnn`` model: its fanouts, seed, ``test_fraction``
    and ``refit``) on ``executor``: the records of the training customers in ``draws`` draws (cycled by epoch) and of
    the validation customers (the fraction ``validation`` of those not held out; None: :meth:`IncentiveModel.fit`'s
    default) in ``out/train`` and ``out/valid`` (all in ``out`` when nothing is held out), and with ``refit`` every
    labelled node's in ``out/test`` too; ``levels`` and ``types`` as :func:`~promokit.incentive.contract.read_tables`
    takes them. Beside them, ``out/records.json`` holds the value list, the feature specs and the encoders, which
    :func:`prepare_from_records` gives a model: a process (a torchrun rank, a Ray worker) then trains from ``out``
    alone with :func:`~promokit.incentive.record_training.fit_from_records`, reading no graph table. ``model`` is
    prepared with them. ``out`` is local (a URI is a one-line error). Returns the counts (graph, seeds per role,
    records and their bytes)."""
    if model._model_params["representation"] != "gnn":
        raise DataError(f"model {model.model_name!r} reads no graph, so it trains on the tables read whole "
                        "(IncentiveModel.fit); over parts, train one of the gnn models")
    if not isinstance(draws, int) or draws < 1:
        raise DataError(f"draws must be a whole number ≥ 1, got {draws!r}")
    out = local_dir(out, "out")
    valid_fraction = validation_fraction(validation)
    grid, customer_spec, merchant_spec, edge_features = _plan(customers, merchants, edges, executor, levels, types)
    spec = RecordSpec(tuple(grid), customer_spec, merchant_spec, tuple(model._model_params["fanouts"]),
                      model.train_config.seed, tuple(range(draws)), (float(model.test_fraction), valid_fraction),
                      refit=model.refit)
    written = write_records(customers, merchants, edges, out, None, spec, executor, edge_features)
    seeds = written["seeds"]
    for role, name in (("train", "training"), ("valid", "validation")):
        redeemed = written["redeemed"][role]
        if (role == "train" or valid_fraction) and not 0 < redeemed < seeds[role]:
            raise DataError(f"customers: the {seeds[role]:,} {name} customers (drawn by id among "
                            f"{sum(seeds.values()):,} labelled) need redemptions and non-redemptions; label more "
                            "customers or use other fractions")
    model.prepare_encoded(grid, customer_spec, merchant_spec, written["encoders"])
    write_json({"levels": [float(v) for v in grid], "customer_spec": customer_spec.to_dict(),
                "merchant_spec": merchant_spec.to_dict(), "encoders": written["encoders"].to_dict(),
                "fanouts": list(spec.fanouts), "draws": list(spec.draws), "seed": spec.seed,
                "holdout": list(spec.holdout), "seeds": seeds}, out / RECORDS_ARTIFACT)
    return {key: written[key] for key in ("customers", "merchants", "edges", "seeds", "merchant_seeds", "records",
                                          "bytes")}


def prepare_from_records(model: IncentiveModel, records: str | os.PathLike) -> IncentiveModel:
    """``model`` prepared (:meth:`IncentiveModel.prepare_encoded`) with the value list, feature specs and encoders
    that :func:`write_training_records` wrote the records in the folder ``records`` with (its ``records.json``),
    reading no graph table: the step before :func:`~promokit.incentive.record_training.fit_from_records` in a
    process that holds only the records. Returns ``model``."""
    path = local_dir(records, "records") / RECORDS_ARTIFACT
    if not path.is_file():
        raise DataError(f"records: no {RECORDS_ARTIFACT} in {records}; write the records with "
                        "promokit.incentive.write_training_records")
    artifact = json.loads(path.read_text())
    return model.prepare_encoded(artifact["levels"], FeatureSpec.from_dict(artifact["customer_spec"]),
                                 FeatureSpec.from_dict(artifact["merchant_spec"]),
                                 InputEncoders.from_dict(artifact["encoders"]))


def _fit_on_every_record(selected: IncentiveModel, records: Path, executor, twin: IncentiveModel) -> None:
    """Fit ``twin``, the refit of ``selected`` (:func:`~promokit.training.refit.refit_twin`): prepared with its
    encoders, trained on ``executor`` from the training, validation and test records in ``records``, validating on
    none."""
    twin.prepare_encoded(selected.levels_, selected.customer_spec_, selected.merchant_spec_, selected.encoders_)
    fit_from_records(twin, [records / role for role in ROLES], executor=executor)


def _plan(customers, merchants, edges, executor, levels, types):
    """Step 1 (module docstring): the value list, the customer and merchant feature specs and the edge features."""
    left, right, edge_parts = list_parts(customers), list_parts(merchants), list_parts(edges)
    check_paired(customers, edges, left, edge_parts)
    scans = executor.map(partial(_scan, CUSTOMER_CONTRACT), left, label="scanning customers")
    merchant_scans = executor.map(partial(_scan, (MERCHANT, *MERCHANT_LABELS)), right, label="scanning merchants")
    offered = np.concatenate([s["levels"] for s in scans + merchant_scans])
    grid = np.unique(offered) if levels is None else np.asarray(levels, dtype=np.float64)
    k = first_with_rows([s["rows"] for s in scans], f"{customers}: the table has no rows")  # columns inferred there
    q = first_with_rows([s["rows"] for s in merchant_scans], f"{merchants}: the table has no rows")
    first = {"customers": _read(left[k]), "merchants": _read(right[q]), "edges": _read(edge_parts[k])}
    known = first["edges"][MERCHANT].isin(first["merchants"][MERCHANT])  # its edges into that merchants part
    with naming(f"{left[k]}, {right[q]} and {edge_parts[k]}"):
        tables = check_tables(first["customers"], first["merchants"], first["edges"][known], levels=grid,
                              require_labels=False, types=types)
    customer_spec = classify_integers(tables.customer_spec, [s["integers"] for s in scans],
                                      list(first["customers"].columns))
    merchant_spec = classify_integers(tables.merchant_spec, [s["integers"] for s in merchant_scans],
                                      list(first["merchants"].columns))
    return grid, customer_spec, merchant_spec, tuple(tables.edge_features)


def _read(path) -> pd.DataFrame:
    with naming(path):
        return read_part(path)


def _scan(contract: tuple[str, ...], path) -> dict:
    """A part's integer columns (no contract column) and its offered values (a customer's where it has a label)."""
    frame = _read(path)
    level = pd.to_numeric(frame[LEVEL], errors="coerce") if LEVEL in frame else pd.Series(dtype=float)
    if REDEEMED in frame:
        level = level[frame[REDEEMED].notna()]
    return {"rows": len(frame), "integers": integer_levels(frame.drop(columns=[c for c in contract if c in frame])),
            "levels": np.unique(level.dropna().to_numpy(np.float64))}
