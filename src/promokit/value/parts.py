"""A value dataset in parts, predicted and trained part by part on an executor (``value predict`` / ``value train
--data DIR --executor local|ray``).

Layout: the user-keyed tables — ``users``, ``deliveries`` and the optional ``behaviors`` and ``consumption`` — are
each a directory of Parquet parts, co-partitioned by user: part k of each (its k-th file in sorted path order) holds
the rows of the same users. ``funds`` stays one table every part shares. The dataset means the one-folder dataset
whose tables are its parts concatenated in order; predicting or training on it gives that dataset's outputs (or
model) without reading it whole. Both begin with the same checks: every user-keyed directory has as many parts as
``users/``, and each user is in one part (:func:`promokit.data.part_keys.check_unique_keys`, hashed on the executor).

Predict (:func:`predict_parts`):

1. a map reads each part's delivery times: their counts and latest times give the scoring time (just after the
   latest delivery of any part, as one folder) and the delivery rows whose contexts every pair is scored in
   (:func:`~promokit.value.estimator.draw_contexts` over all the deliveries; the driver reads those few rows);
2. a map with the model loaded once per worker (the executor's ``setup``): each part is validated by
   :func:`~promokit.value.contract.check_tables` (``part=True``: a row whose user is not in the part's users is an
   error) and scored by :meth:`ValueModel.score_table` and :meth:`ValueModel.predict` into
   ``OUT/scores/part-k`` and ``OUT/deliveries/part-k``; only its sums travel back (:class:`PartValues`).

Train (:func:`train_parts`; the training deliveries are the examples):

1. **scan**: each part's delivery times (distinct values and counts) and the distinct values of the integer columns
   of its deliveries and users. The driver infers the feature specs on the first part with deliveries, with the
   integer columns classified by their values over every part (as on the concatenation), and turns the time counts
   into the boundary times of the model's :meth:`~ValueModel.split_rows` (:class:`DeliverySplit`): the same
   deliveries are held out for evaluate and for validation as one folder holds out (a random split draws the same
   permutation of all the deliveries);
2. **count**: each part, validated with its labels, sends its share of the encoders (:meth:`InputEncoders.count`:
   the context features' counts and moments over its training deliveries, its users', its behaviours' actions) and
   its label sums (:meth:`ValueModel.label_counts`, with the hashes of its training deliveries' users). The driver
   adds them up into the encoders :meth:`InputEncoders.fit` builds on the concatenation
   (:meth:`InputEncoders.from_counts`), checks the labels, starts the amount towers and unites the users' hashes
   (the model's ``training_ids.npy``) as :meth:`ValueModel.fit` does (:meth:`ValueModel.fit_counts`);
3. **train**: the executor's ``train`` — the loop conversion models train with — streams each worker's
   shard of the training deliveries: a worker reads part k of every user-keyed table, validates it and encodes that
   part's deliveries (user and fund features, behaviour sequences strictly before each delivery, context) with
   the fitted encoders (:class:`DeliveryRows`); each delivery carries its user's and fund's features, since a batch
   mixes parts. In this process with the local executor, data-parallel on Ray Train with ``--executor ray``;
4. **refit** (with the model's ``refit``, the default, and deliveries held out): steps 1–3 again on the same
   executor, every delivery training and none validating or held out, for the epochs the selection kept
   (:func:`~promokit.training.refit.refit_after_selection`): the encoders, the amount start and the network of
   :meth:`ValueModel.fit`'s refit. The held-out deliveries are not scored before it (the dataset is never read
   whole), so no held-out metrics are kept: ``refit=False`` keeps the selected model, which ``evaluate`` then
   scores on them.

A model that reads the consumption graph (``esdpm``) needs every user's e_c, and a merchant joins users of different
parts: predict first computes e_c over the whole payment graph in shards (:mod:`promokit.value.consumption`), then
scores each part with its users' e_c given. Training such a model first writes, on the executor, each users part's
records — its users' sampled neighbourhoods with the GNN's inputs joined (:mod:`promokit.value.graph_records`, which
also counts the graph's encoders) — then trains with each delivery's e_c computed on its user's record
(:mod:`promokit.value.graph_training`).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from promokit.data import graph_shards
from promokit.data.errors import DataError
from promokit.data.io import write_part
from promokit.data.part_keys import check_unique_keys
from promokit.data.part_scoring import PartScore, part_score
from promokit.data.parts import naming, parquet, part_name, read_part
from promokit.data.spec import FeatureSpec, require_columns
from promokit.data.split import FRACTION, ROWS, TABLE, parse_validation
from promokit.data.split import TIME as AT_TIME
from promokit.data.uris import as_path, begin_parts, finish_parts, is_uri, local_dir, scratch_dir
from promokit.value.contract import TIME, USER, ValueTables, parse_times
from promokit.value.defaults import VALIDATION_FRACTION
from promokit.value.leaks import warn_leaks, warn_validation_leak
from promokit.value.part_tables import USER_KEYED, ValuePart, dataset_parts, read_part_tables

if TYPE_CHECKING:  # the model (torch) is imported where a part is scored or trained, not where its times are read
    from promokit.value.estimator import DeliverySplit, ValueModel

OUTPUTS = ("scores", "deliveries")  # the folders of OUT that parts are written to


@dataclass(frozen=True)
class PartTimes:
    """A part's deliveries: how many, the latest time (contract form) and its kind (None when it has none)."""

    rows: int
    latest: int | float | None
    kind: str | None


@dataclass(frozen=True)
class PartValues:
    """What a scored part reports: the rows and ``score_<fund>`` sums of its ETV table, per fund the users whose
    highest ETV it is, and its deliveries."""

    etv: PartScore
    best: dict
    deliveries: int


def in_parts(paths: dict[str, Path]) -> bool:
    """True when a user-keyed table of the dataset (:func:`~promokit.value.contract.table_paths`) is a directory."""
    return any(paths[name].is_dir() for name in USER_KEYED if name in paths)


def score_stats(scores: pd.DataFrame, deliveries: int) -> PartValues:
    """The :class:`PartValues` of an ETV table (``value predict``'s scores, one folder or one part)."""
    etv = scores[[c for c in scores.columns if c.startswith("score_")]]
    best = np.bincount(np.argmax(etv.to_numpy(), axis=1), minlength=etv.shape[1]) if len(etv) else \
        np.zeros(etv.shape[1], dtype=np.int64)
    return PartValues(part_score(etv), dict(zip(etv.columns, best.tolist())), deliveries)


def predict_parts(model: Path, paths: dict[str, Path], out: Path, executor, at, contexts: int
                  ) -> tuple[str, list[PartValues]]:
    """Score the dataset in parts at ``paths`` with the model directory ``model`` on ``executor`` into ``out`` as
    of ``at`` (None: just after the latest delivery) in ``contexts`` drawn delivery contexts (module docstring);
    return the model's name and each part's :class:`PartValues`."""
    from promokit.training import read_model_config
    from promokit.value.estimator import ValueModel
    from promokit.value.models import RENAMED

    config = read_model_config(model, "value")
    parts = dataset_parts(paths, out)
    with scratch_dir(out, ".user-keys") as scratch:
        check_unique_keys([p.files["users"] for p in parts], USER, scratch, map_parts=executor.map)
    times = executor.map(_times, parts, label="reading delivery times")
    load = partial(ValueModel.load, model)  # one setup for every map: each worker loads the model once
    layout = None
    with scratch_dir(out, ".graph") as graph_scratch:
        try:
            if config["params"].get("graph"):  # the floor hurdle has no graph setting
                from promokit.value.consumption import consumption_states

                if "consumption" not in paths:
                    raise DataError(f"{model}: model {config['model']!r} reads the consumption graph: give the "
                                    "consumption/ parts")
                specs = {name: FeatureSpec.from_dict(spec) for name, spec in config["specs"].items()}
                layout = consumption_states(parts, specs, len(config["params"]["fanouts"]), graph_scratch,
                                            executor, load)
            score = partial(_score_part, _when(paths["deliveries"], parts, times, at),
                            _contexts(parts, times, contexts), layout)
            for folder in OUTPUTS:
                begin_parts(out / folder)
            values = executor.map(score, parts, setup=load, label="scoring parts")
        finally:
            executor.release()
            if layout is not None:
                graph_shards.remove(layout)
    names = [part_name(p.index) for p in parts]
    for folder, rows in zip(OUTPUTS, ([v.etv.rows for v in values], [v.deliveries for v in values])):
        finish_parts(out / folder, names, rows)  # a URI's manifest: an earlier run's other parts are not read
        if not is_uri(out):  # parts an earlier run with more input parts left there
            for stale in set((out / folder).glob("part-*.parquet")) - {out / folder / name for name in names}:
                stale.unlink()
    return RENAMED.get(config["model"], config["model"]), values


def _times(part: ValuePart) -> PartTimes:
    """A part's delivery times, its ``time`` column alone read."""
    path = part.files["deliveries"]
    try:
        frame = parquet(path, columns=[TIME])
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"{path}: cannot read its 'time' column: "
                        f"{(str(exc).strip().splitlines() or [type(exc).__name__])[0]}") from None
    if frame.empty:
        return PartTimes(0, None, None)
    with naming(path):
        time, kind = parse_times(frame, "deliveries", None)
    return PartTimes(len(time), time.max(), kind)


def _when(deliveries: Path, parts: list[ValuePart], times: list[PartTimes], at):
    """The scoring time of every part: ``at``, or just after the latest delivery of any part."""
    from promokit.value.estimator import scoring_time

    _delivery_kind(deliveries, parts, times, "pairs are scored in the contexts of deliveries")
    return scoring_time(np.array([t.latest for t in times if t.rows]), at)


def _delivery_kind(deliveries: Path, parts: list[ValuePart], times: list, why: str = "a model learns from them"
                   ) -> str:
    """The kind of the parts' delivery times (``times``: each part's ``rows`` and ``kind``), checked to be one."""
    filled = [(part, t) for part, t in zip(parts, times) if t.rows]
    if not filled:
        raise DataError(f"{deliveries}: no deliveries in its {len(parts)} parts; {why}")
    first, kind = filled[0][0].files["deliveries"], filled[0][1].kind
    for part, t in filled[1:]:
        if t.kind != kind:
            raise DataError(f"{part.files['deliveries']}: column 'time' holds {t.kind}s but {first} holds {kind}s; "
                            "give every part times of one kind")
    return kind


def _contexts(parts: list[ValuePart], times: list[PartTimes], contexts: int) -> pd.DataFrame:
    """The delivery rows :func:`draw_contexts` draws from every part's deliveries in order, read from their parts."""
    from promokit.value.estimator import draw_contexts

    counts = np.array([t.rows for t in times])
    ends = np.cumsum(counts)
    rows = draw_contexts(int(ends[-1]), contexts)
    owners = np.searchsorted(ends, rows, side="right")
    frames = {k: read_part(parts[k].files["deliveries"]) for k in set(owners.tolist())}
    return pd.concat([frames[k].iloc[[row - (ends[k] - counts[k])]] for k, row in zip(owners, rows)],
                     ignore_index=True)


def _score_part(when, context: pd.DataFrame, layout, model: ValueModel, part: ValuePart) -> PartValues:
    """Validate and score one part at time ``when`` in the ``context`` rows (with its users' e_c from ``layout``
    when the model reads the consumption graph); write its output parts."""
    tables = read_part_tables(part, model.feature_specs_)
    if layout is not None:
        from promokit.value.consumption import part_states

        model.use_consumption_states(tables, part_states(layout, model, part.index))
    scores = model.score_table(tables, when, context_rows=context)
    deliveries = model.predict(tables)
    for folder, frame in zip(OUTPUTS, (scores, deliveries)):
        write_part(frame, as_path(part.out) / folder, part.index)
    return score_stats(scores, len(deliveries))


# ----------------------------------------------------------------------------------------------------------- training


@dataclass(frozen=True)
class PartScan:
    """A part before its encoders are counted: its deliveries (``rows``), their times (distinct values in contract
    form and counts) and kind, and the distinct values of the integer columns of its deliveries (``context``) and
    users (:func:`promokit.training.shards.integer_levels`)."""

    rows: int
    times: tuple | None
    kind: str | None
    levels: dict


@dataclass(frozen=True)
class PartCount:
    """A part's share of the fit: its encoders' counts (:meth:`InputEncoders.count`), its label sums
    (:meth:`ValueModel.label_counts`) and its tables' counts (repaired labels)."""

    shares: dict
    labels: dict
    counts: dict


@dataclass(frozen=True)
class DeliveryRows:
    """The deliveries of one role (:data:`~promokit.value.estimator.TRAIN` or ``VALID``) of a dataset's parts, read
    by a training worker a segment at a time (:class:`promokit.training.shard_loop.TrainJob`); ``offsets[k]`` is the
    position of part k's first delivery in the parts' concatenation."""

    parts: tuple[ValuePart, ...]
    specs: dict
    split: DeliverySplit
    offsets: tuple[int, ...]
    role: int
    repair: bool
    labels: dict | None = None
    user_rows: bool = False

    def load(self, estimator: ValueModel, segment: tuple[int, int, int]) -> dict:
        """The tensors of rows ``start:stop`` of this role's deliveries of part ``index``, each carrying its user's
        and fund's features (a batch mixes parts) and, with ``user_rows``, its user's row in the part
        (``user_row``: where its consumption-graph record is, :mod:`promokit.value.graph_training`)."""
        index, start, stop = segment
        tables = read_part_tables(self.parts[index], self.specs, True, self.repair, labels=self.labels)
        roles = self.split.roles(tables.time, self.offsets[index])
        rows = np.flatnonzero(roles == self.role)[start:stop]
        tensors = estimator.encoders_.rows(tables, rows, carry_nodes=True)
        if self.user_rows:
            import torch

            tensors["user_row"] = torch.from_numpy(tables.user[rows].astype(np.int64))
        return tensors


def train_parts(estimator: ValueModel, paths: dict[str, Path], executor, scratch: Path,
                validation: float | None = None, checkpoint_dir: Path | None = None, resume: bool = False,
                repair: bool = False, types: dict[str, str] | None = None, graph_draws: int = 1) -> dict:
    """Fit ``estimator`` on the dataset in parts at ``paths`` without holding it whole (module docstring): part by
    part in this process on the local ``executor``, else data-parallel on ``executor.workers`` Ray Train workers,
    holding out the deliveries :meth:`ValueModel.fit` holds out of one folder, validating on the fraction
    ``validation`` of the rest (None: ``fit``'s default), with the checkpoint in ``checkpoint_dir``; ``scratch``
    holds the user-key check's hashes. A model that reads the consumption graph first writes its records
    (``graph_draws`` neighbourhoods per user, :mod:`promokit.value.graph_training`) in a folder beside
    ``checkpoint_dir`` (or the scratch folder), removed after training. With the estimator's ``refit`` it is then
    refit on every delivery (module docstring, step 4). Returns the deliveries per role of the selection
    (``train``, ``valid``, ``test``) and the tables' counts summed over the parts (repaired labels). ``types``: the
    types of inferred features (:func:`~promokit.value.contract.check_tables`). The parts may be URIs,
    ``checkpoint_dir`` and ``scratch`` not (a one-line error)."""
    from promokit.training.refit import refit_after_selection
    from promokit.training.shard_loop import checkpoint_folder
    from promokit.training.shards import wide_over_parts
    from promokit.value.estimator import FitReport

    checkpoint_dir = checkpoint_folder(checkpoint_dir)
    scratch = local_dir(scratch, "scratch")
    if not estimator.is_neural:
        raise DataError(f"model {estimator.model!r} boosts its trees on the whole training table in one process, so "
                        "it does not train over parts; give the tables as one folder, or train a network (esdpm-ncg)")
    if estimator.reads_graph and "consumption" not in paths:
        raise DataError(f"model {estimator.model!r} reads the consumption graph: give the consumption/ parts (or "
                        "train esdpm-ncg, the same model without it)")
    estimator._start_fit()
    wide_over_parts(estimator.model_params_)
    job, counts = _plan(estimator, paths, executor, scratch, repair, types, validation)
    # out of the checkpoint folder, which a fresh run empties
    records = Path(f"{checkpoint_dir}.graph-records") if checkpoint_dir is not None else \
        Path(scratch).parent / "graph-records"
    try:
        if estimator.reads_graph:
            from promokit.value.graph_records import write_records
            from promokit.value.graph_training import GraphJob

            write_records(dataset_parts(paths), job.train_rows.specs, estimator.encoders_, records,
                          estimator.model_params_["fanouts"], estimator.train_config.seed, range(graph_draws), executor)
            job = GraphJob(job, str(records), graph_draws)
        estimator.net_, estimator.history_ = executor.train(job, checkpoint_dir, resume)
    finally:
        shutil.rmtree(records, ignore_errors=True)
    warn_validation_leak(estimator.history_)
    estimator.report_ = FitReport(counts["train"], counts["valid"], counts["test"])
    refit_after_selection(estimator, None, None, fit=lambda twin: train_parts(
        twin, paths, executor, scratch, 0.0, repair=repair, types=types, graph_draws=graph_draws))
    return counts


def _plan(estimator: ValueModel, paths: dict[str, Path], executor, scratch: Path, repair: bool,
          types: dict[str, str] | None = None, validation: float | None = None):
    """Scan and count the parts on ``executor``, fit the estimator's encoders from the counts and cut the shards of
    the executor's workers: the :class:`~promokit.training.shard_loop.TrainJob` and the counts :func:`train_parts`
    returns."""
    from promokit.training.shard_loop import TrainJob
    from promokit.training.shards import summed_time_counts
    from promokit.value.estimator import TEST, TRAIN, VALID, DeliverySplit, check_split
    from promokit.value.inputs import InputEncoders

    split = estimator.holdout_for(parse_validation(
        validation, default=VALIDATION_FRACTION, model="a value model over parts", tables=(pd.DataFrame, ValueTables),
        takes={FRACTION: "a fraction in [0, 1) of the deliveries"},
        refuses={ROWS: "deliveries in parts have no row positions",
                 AT_TIME: "a dataset in parts validates on a fraction of its deliveries",
                 TABLE: "the network holds one dataset: the validation deliveries belong in its parts"}))
    check_split(split["test_fraction"], split["valid_fraction"], split["how"])
    parts = dataset_parts(paths)
    check_unique_keys([p.files["users"] for p in parts], USER, scratch, map_parts=executor.map)
    scans = executor.map(_scan, parts, label="scanning parts")
    _delivery_kind(paths["deliveries"], parts, scans)
    first = next(k for k, scan in enumerate(scans) if scan.rows)
    specs, funds, sample = _feature_specs(parts[first], scans, repair, types, estimator.labels)
    sizes = [scan.rows for scan in scans]
    offsets = tuple(int(o) for o in np.cumsum([0, *sizes[:-1]]))
    if split["how"] == "time":
        with naming(paths["deliveries"]):  # the deliveries of every part together
            rule = DeliverySplit.by_time(summed_time_counts([s.times for s in scans if s.rows]),
                                         split["test_fraction"], split["valid_fraction"])
    else:
        rule = DeliverySplit("random", n=sum(sizes), test_fraction=split["test_fraction"],
                             valid_fraction=split["valid_fraction"], seed=split["seed"])
    counted = executor.map(partial(_count, specs, rule, offsets, repair, estimator.labels), parts,
                           label="counting parts")
    with naming(paths["deliveries"]):
        estimator.fit_counts(specs, InputEncoders.from_counts([c.shares for c in counted], specs, funds,
                                                              estimator.max_len), [c.labels for c in counted], split)
    # the label-leak guard judges the training deliveries of the first part with deliveries (as conversion's does)
    trained = np.flatnonzero(rule.roles(sample.time, offsets[first]) == TRAIN)
    warn_leaks(sample, trained, specs, estimator.allowed_leaks, estimator.labels)
    training_parts = tuple(replace(p, files={k: v for k, v in p.files.items() if k != "consumption"}) for p in parts)
    rows = [np.array([c.labels["rows"][role] for c in counted]) for role in (TRAIN, VALID, TEST)]
    reader = partial(DeliveryRows, training_parts, specs, rule, offsets, repair=repair, labels=estimator.labels,
                     user_rows=estimator.reads_graph)
    job = TrainJob.cut(estimator, reader(TRAIN), reader(VALID) if rows[VALID].sum() else None, rows[TRAIN].tolist(),
                       rows[VALID].tolist(), executor.workers)
    counts = {name: int(r.sum()) for name, r in zip(("train", "valid", "test"), rows)}
    for c in counted:
        for what, k in c.counts.items():
            if what.startswith("repaired"):
                counts[what] = counts.get(what, 0) + k
    return job, counts


def _scan(part: ValuePart) -> PartScan:
    """A part's deliveries' times and its integer columns' values."""
    from promokit.training.shards import integer_levels, time_counts

    users, deliveries = (read_part(part.files[name]) for name in ("users", "deliveries"))
    levels = {"context": integer_levels(deliveries), "users": integer_levels(users)}
    if deliveries.empty:
        return PartScan(0, None, None, levels)
    with naming(part.files["deliveries"]):
        require_columns(deliveries, [TIME], "deliveries")
        time, kind = parse_times(deliveries, "deliveries", None)
    return PartScan(len(time), time_counts(time), kind, levels)


def _feature_specs(first: ValuePart, scans: list[PartScan], repair: bool, types: dict[str, str] | None,
                   labels: dict[str, str] | None) -> tuple[dict, pd.DataFrame, ValueTables]:
    """The feature specs of the dataset — inferred on ``first``, the first part with deliveries (the columns of
    ``types`` of the type given), integer columns classified by their values over every part, as on the parts'
    concatenation — the funds table, validated, and the tables of that part."""
    from promokit.training.shards import classify_integers

    tables = read_part_tables(first, None, True, repair, types, labels)
    specs = {"context": tables.context_spec, "users": tables.user_spec, "funds": tables.fund_spec}
    for name, frame in (("context", tables.deliveries), ("users", tables.users)):
        specs[name] = classify_integers(specs[name], [scan.levels[name] for scan in scans], list(frame.columns))
    return specs, tables.funds, tables


def _count(specs: dict, rule: DeliverySplit, offsets: tuple[int, ...], repair: bool, labels: dict | None,
           part: ValuePart) -> PartCount:
    """Validate a part with its labels (read from the columns ``labels`` names); count its training deliveries'
    features, its users' and its labels."""
    from promokit.value.estimator import TRAIN, ValueModel
    from promokit.value.inputs import InputEncoders

    tables = read_part_tables(part, specs, True, repair, labels=labels)
    roles = rule.roles(tables.time, offsets[part.index])
    return PartCount(InputEncoders.count(tables, np.flatnonzero(roles == TRAIN)),
                     ValueModel.label_counts(tables, roles), tables.counts)
