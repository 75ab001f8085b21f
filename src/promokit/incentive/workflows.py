"""What ``promokit incentive train``, ``predict`` and ``recalibrate`` do, as functions: fit a model on tables read
from paths; write every node's scores for ``allocate budget``, from one graph scored in this process or from a graph
in parts scored shard by shard on an executor (:mod:`promokit.incentive.parts`), made by the caller, never here;
recalibrate a model directory on a later labelled experiment."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from promokit.data.errors import DataError
from promokit.data.io import read_table, write_json, write_parquet
from promokit.data.parts import is_partitioned
from promokit.data.spec import map_labels
from promokit.data.uris import as_path, local_dir
from promokit.incentive.contract import CUSTOMER, CUSTOMER_LABELS, read_tables
from promokit.incentive.estimator import IncentiveModel, validation_fraction, wide_scores
from promokit.training.recalibration import DEFAULT_METHOD, write_recalibration


@dataclass(frozen=True)
class Training:
    """What :func:`train` did: the fitted ``model``, the graph's ``counts``
    (:attr:`~promokit.incentive.contract.IncentiveTables.counts`; over parts, :func:`train_parts`'s) and the
    customers and merchants it trained on; ``parts``: the customer parts trained over (0: tables read whole)."""

    model: IncentiveModel
    counts: dict
    customers: int
    merchants: int
    parts: int = 0


def train(model: IncentiveModel, data, *, levels=None, types: dict[str, str] | None = None,
          labels: dict[str, str] | None = None, validation: float | None = None,
          checkpoint_dir: str | os.PathLike | None = None, resume: bool = False, executor=None,
          draws: int = 1) -> Training:
    """Read ``data`` with ``levels``, ``types`` and ``labels`` (:func:`~promokit.incentive.contract.read_tables`) and
    fit ``model`` on it with ``validation``, ``checkpoint_dir`` and ``resume`` (:meth:`IncentiveModel.fit`). With
    customers, edges and merchants in parts, train over them on ``executor`` with ``draws`` neighbourhood draws
    (:func:`~promokit.incentive.train_parts`, records in a scratch folder beside the checkpoint). The
    checkpoint is local: a URI there is a one-line error, before the tables are read."""
    validation_fraction(validation)  # refused before the tables are read
    checkpoint_dir = None if checkpoint_dir is None else local_dir(checkpoint_dir, "checkpoint_dir")
    if isinstance(data, dict) and data.get("customers") is not None and is_partitioned(data["customers"]):
        return _train_parts(model, data, levels, types, labels, validation, checkpoint_dir, resume, executor, draws)
    tables = read_tables(data, levels=levels, types=types, labels=labels)
    model.fit(tables, validation=validation, checkpoint_dir=checkpoint_dir, resume=resume)
    split = model.split_rows(tables)
    return Training(model, tables.counts, len(split.train_customers), len(split.train_merchants))


def _train_parts(model, data, levels, types, labels, validation, checkpoint_dir, resume, executor,
                 draws) -> Training:
    import tempfile

    from promokit.data.parts import list_parts
    from promokit.incentive.parts_training import train_parts

    given = [name for name in ("items", "item_edges", "customer_edges") if data.get(name) is not None]
    if given or labels or data.get("merchants") is None or data.get("edges") is None:
        raise DataError(f"customers: {data['customers']} is in parts; training over parts takes a customer–merchant "
                        "graph (merchants and edges in parts) with its own label columns, without items, item_edges, "
                        "customer_edges or labels")
    with tempfile.TemporaryDirectory(prefix="promokit-records-",
                                     dir=Path(checkpoint_dir).parent if checkpoint_dir else None) as scratch:
        counts = train_parts(model, data["customers"], data["merchants"], data["edges"], scratch, executor,
                             levels=levels, types=types, validation=validation, draws=draws,
                             checkpoint_dir=checkpoint_dir, resume=resume)
    return Training(model, counts, counts["seeds"]["train"], 0, len(list_parts(data["customers"])))


@dataclass(frozen=True)
class WrittenScores:
    """What :func:`predict` wrote: the customers' and the merchants' score tables (files, or folders of parts
    for a graph in parts; ``merchants`` None for a model fit on customers only), and the ``summary`` it wrote to
    ``summary.json``."""

    customers: Path
    merchants: Path | None
    summary: dict
    in_parts: bool


def predict(model: str | os.PathLike, customers, merchants, edges, out: str | os.PathLike,
            executor=None, *, graph: dict | None = None) -> WrittenScores:
    """Score every customer and merchant of the graph of ``customers``, ``merchants`` and ``edges`` (table paths) at
    every value with the model directory ``model``, into the folder ``out``: ``customers.parquet`` and
    ``merchants.parquet`` in the wide layout of ``allocate budget`` (``user_id``, ``score_<level>`` …) and
    ``summary.json``; a recalibrated model (:func:`recalibrate`) scores the customers recalibrated, and writes its own
    curves beside them as ``customers_raw.parquet`` (same layout; not in parts). With ``customers`` in parts (a
    directory or glob; ``edges`` co-partitioned with them, ``merchants`` one table or parts), the graph is scored
    shard by shard on ``executor``, into ``customers/`` and ``merchants/``, a part per input part. A model fit on customers only scores ``customers`` alone (``merchants``
    and ``edges`` None) into ``customers.parquet``; one fit on another graph takes its tables as ``graph`` (name →
    path: ``item_edges`` and ``items``, or ``customer_edges``) and scores the customers alone. The tables and
    ``out`` may be URIs (:mod:`promokit.data.uris`)."""
    out = as_path(out)
    graph = {name: table for name, table in (graph or {}).items() if table is not None}
    if is_partitioned(customers):
        if graph:
            raise DataError(f"`customers` {customers} is in parts: scoring in parts serves a customer–merchant graph; "
                            f"score a graph of {' and '.join(graph)} as one table each")
        if merchants is None or edges is None:
            raise DataError(f"`customers` {customers} is in parts: scoring in parts needs the graph's `merchants` and "
                            "`edges`; score customers alone as one table")
        if executor is None:
            raise DataError(f"`customers` {customers} is a graph in parts: give the `executor` that scores it")
        from promokit.incentive.parts import predict_parts

        summary = predict_parts(Path(model), as_path(customers), as_path(merchants), as_path(edges), out,
                                executor)
        written = WrittenScores(out / "customers", out / "merchants", summary, in_parts=True)
    else:
        estimator = IncentiveModel.load(model)
        tables = estimator.read({"customers": customers, "merchants": merchants, "edges": edges, **graph},
                                require_labels=False)
        customer_scores, merchant_scores = estimator.score_tables(tables)
        merchants_out = None if tables.graph != "merchants" else out / "merchants.parquet"
        recalibrated = estimator.recalibration_ is not None
        written = WrittenScores(out / "customers.parquet", merchants_out, {
            "model": estimator.model, "levels": estimator.levels_.tolist(), "customers": len(customer_scores),
            "merchants": len(merchant_scores), **{k: v for k, v in tables.counts.items() if k.startswith("isolated")},
            "mean_customer_response": customer_scores.drop(columns="user_id").mean().round(6).tolist(),
            "mean_merchant_response": ([] if merchants_out is None else
                                       merchant_scores.drop(columns="user_id").mean().round(6).tolist()),
            "recalibration": estimator.recalibration_.method if recalibrated else None},
            in_parts=False)
        write_parquet(customer_scores, written.customers)
        if recalibrated:
            raw = estimator.responses(tables).customers_raw
            write_parquet(wide_scores(tables.customers[CUSTOMER], raw, estimator.levels_),
                          out / "customers_raw.parquet")
        if merchants_out is not None:
            write_parquet(merchant_scores, merchants_out)
    write_json(written.summary, out / "summary.json")
    return written


def recalibrate(model: str | os.PathLike, customers, merchants=None, edges=None, *, method: str = DEFAULT_METHOD,
                labels: dict[str, str] | None = None, graph: dict | None = None, by: str | None = None) -> dict:
    """Recalibrate the model directory ``model`` (:meth:`IncentiveModel.recalibrate`, ``method``; by offered value
    with ``by="level"``) on the labelled
    customers of a later experiment: the graph of ``customers``, ``merchants`` and ``edges`` (table paths; a model fit
    on customers only: ``customers`` alone; on another graph: its tables as ``graph``, as in :func:`predict`), each
    labelled customer with the value offered and the response (``labels``: the label columns' mapping, as in
    ``evaluate``). Writes ``recalibration.json`` into ``model``
    atomically, leaving the rest of the directory as it is, so ``predict`` and ``evaluate`` apply it. Returns what it
    was fitted on (:attr:`Recalibration.fitted_on`: ``rows``, ``positives``, ``rate`` observed, ``mean_p`` before and
    ``mean_p_after``, f_c at the offered values; by level also ``groups`` and ``own_maps``) with the ``method`` and
    ``by``."""
    local_dir(model, "model")  # the model directory it writes into: a local folder
    estimator = IncentiveModel.load(model)
    if labels:  # read as for scoring, a mapped label column that is missing would be passed over
        customers = map_labels(read_table(customers), labels, CUSTOMER_LABELS, "customers")
    graph = {name: table for name, table in (graph or {}).items() if table is not None}
    tables = estimator.read({"customers": customers, "merchants": merchants, "edges": edges, **graph},
                            require_labels=False, labels=labels)
    estimator.recalibrate(tables, method=method, by=by)
    write_recalibration(model, estimator.recalibration_)
    return {"method": method, "by": by, **estimator.recalibration_.fitted_on}


def graph_summary(graph: str, counts: dict) -> str:
    """What ``train`` says of the graph it read (``graph``: :data:`~promokit.incentive.contract.GRAPHS`, or
    ``none``)."""
    if graph == "none":
        return (f"customers only (no merchants, no edges): {counts['unlabelled_customers']:,} customers without a "
                "label (not in the loss)")
    kind = {"merchants": "", "items": "customer–item ", "customers": "customer–customer "}[graph]
    others = {"merchants": f" and {counts.get('isolated_merchants', 0):,} merchants",
              "items": f" and {counts.get('isolated_items', 0):,} of {counts.get('items', 0):,} items"}.get(graph, "")
    return (f"graph: {counts['edges']:,} {kind}edges; {counts['isolated_customers']:,} customers{others} without "
            f"edges; {counts['unlabelled_customers']:,} customers without a label (in the graph, not in the loss)")
