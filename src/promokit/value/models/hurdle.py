"""The value domain's floor: a hurdle model (also called a two-part model) — gradient-boosted trees for P(convert)
on every delivery, the hurdle, and for the log amount v = log(1 + amount) on the converted ones — whose ETV is the
product P(convert) · E[amount | convert]."""

from __future__ import annotations

import json
import os
from pathlib import Path

import lightgbm as lgb
import numpy as np
import torch
from torch import Tensor

from promokit.data import DataError
from promokit.metrics import auc
from promokit.training import History
from promokit.training.solve_progress import BoostingProgress
from promokit.value.contract import FUND
from promokit.value.inputs import InputEncoders, NodeInputs

#: the model directory's files: ``hurdle_convert.txt``, ``hurdle_amount.txt`` and ``hurdle.json``
PREFIX = "hurdle"
#: their prefix in a model directory written while the floor was called ``two-part`` (still read)
FORMER_PREFIX = "two_part"
#: the least value of each whole-number setting; the fractions are in (0, 1], the learning rate above 0
LEAST = {"n_trees": 1, "num_leaves": 2, "min_child_samples": 1, "early_stopping_rounds": 1, "threads": 1}
FRACTIONS = ("subsample", "colsample")
#: the settings that may be None, and what None means
OPTIONAL = {"n_trees_amount": " (or null: n_trees)", "smearing": " (or null: estimated)"}


class Hurdle:
    """P(convert | x) by a LightGBM classifier over every delivery (the entire space: a delivery converts only after
    a click, so this is pCTCVR), and μ(x) = E[v | x, convert] by a LightGBM regression (squared error) of
    v = log(1 + amount) on the converted deliveries. Then

        E[amount | x, convert] = exp(μ(x)) · S − 1,     ETV = P(convert | x) · E[amount | x, convert],

    with S the smearing factor of Duan (1983): the mean of exp(v − μ(x)) over the converted validation deliveries
    (held-out residuals: a boosted model's in-sample residuals are too small), or over the converted training
    deliveries without validation rows. For a normal residual of variance σ², S = exp(σ²/2), eq. 13's factor;
    smearing takes the residuals as they are. S is one number for everyone: the residual spread is not modelled per
    user (the networks' σ tower does that).

    The inputs are the networks' (eq. 14) without the consumption graph: the user's, fund's and context's encoded
    features (categorical codes as LightGBM categorical features) and, from the behaviour sequence the networks
    attend over (the user's last ``max_len`` events strictly before the delivery), the number of events of each
    action and of each action on the delivered fund.

    ``n_trees`` caps both stages' trees, ``n_trees_amount`` the amount stage's apart (None: ``n_trees``); each
    stage stops early on the validation rows. ``smearing`` fixes S instead of estimating it (None). A refit on every
    delivery (:mod:`promokit.training.refit`) fixes all three at what the validation rows chose
    (:attr:`chosen_params`): the trees each stage kept, and S from the held-out residuals, which a refit without
    validation rows would otherwise take from its too small training residuals.

    ``threads`` is LightGBM's: one by default, the same trees on every machine and no spinning threads on a busy one
    (two took ten times longer on a loaded 2-core machine); more for tables of millions of deliveries.

    The boosters are stored in LightGBM's text format and S in ``hurdle.json`` (nothing is pickled). At inference it
    answers the calls of :class:`~promokit.value.models.ESDPM` (``attach``, ``__call__`` on a batch of deliveries,
    ``pair_outputs``), with torch tensors in and out.

    The value domain's floor, not from the papers: the EOCA paper ("Expected Transaction Value Optimization for
    Precise Marketing in FinTech Platforms", Weng et al., ``eoca-expected-transaction-value.txt``) has no tree
    baseline. Its ETV is the paper's eq. (6), ETV = pCTCVR × E(PA), with the log amount v of eq. (7); for a normal
    residual, S = exp(σ²/2) gives eq. (13).

    Args:
        encoders: the fitted input encoders (the funds' fund key and the actions' count are read from them).
        n_trees: the most trees per stage.
        learning_rate: the boosting shrinkage.
        num_leaves: the most leaves per tree.
        min_child_samples: the fewest rows per leaf.
        subsample: the fraction of rows each tree samples.
        colsample: the fraction of features each tree samples.
        early_stopping_rounds: rounds without a validation improvement before a stage stops.
        threads: LightGBM's threads.
        n_trees_amount: the amount stage's most trees apart from ``n_trees`` (``None``: ``n_trees``).
        smearing: the smearing factor S, fixed (``None``: estimated).

    Shapes:
        - **input:** a batch of B deliveries (``user``, ``fund`` ``(B,)``, ``ctx_cat`` ``(B, F_x)``, ``ctx_num``
          ``(B, D_x)``, ``seq`` ``(B, L, 2)``), with the node inputs attached; :meth:`fit` also ``convert`` and
          ``v`` ``(B,)``
        - **output:** ``p_ctcvr``, ``mu``, ``amount_if_convert``, ``etv``, ``(B,)`` tensors each
    """

    def __init__(self, encoders: InputEncoders, n_trees: int = 500, learning_rate: float = 0.05,
                 num_leaves: int = 31, min_child_samples: int = 20, subsample: float = 0.8, colsample: float = 0.8,
                 early_stopping_rounds: int = 30, threads: int = 1, n_trees_amount: int | None = None,
                 smearing: float | None = None):
        self.params = dict(n_trees=n_trees, learning_rate=learning_rate, num_leaves=num_leaves,
                           min_child_samples=min_child_samples, subsample=subsample, colsample=colsample,
                           early_stopping_rounds=early_stopping_rounds, threads=threads,
                           n_trees_amount=n_trees_amount, smearing=smearing)
        self.check_params(self.params)
        self.fund_key = list(encoders.funds.categorical).index(FUND)
        self.n_actions = encoders.actions.cardinality
        self.boosters: dict[str, lgb.Booster] = {}
        self.smearing: float | None = None
        #: what the last :meth:`fit` chose on validation rows (:attr:`chosen_params`)
        self._chosen: dict = {}
        self.nodes: NodeInputs | None = None

    @staticmethod
    def check_params(params: dict) -> None:
        """A one-line :class:`DataError` for a setting (of :meth:`__init__`'s) LightGBM would reject or misread."""
        for name, least in {**LEAST, "n_trees_amount": 1}.items():
            value = params.get(name)
            if name in OPTIONAL and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise DataError(f"hurdle: {name} must be a whole number ≥ {least}{OPTIONAL.get(name, '')}, "
                                f"got {value!r}")
        for name in (*FRACTIONS, "learning_rate", "smearing"):
            value, most = params.get(name), 1 if name in FRACTIONS else np.finfo(float).max
            if name in OPTIONAL and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= most:
                bounds = "in (0, 1]" if name in FRACTIONS else "a finite number > 0"
                raise DataError(f"hurdle: {name} must be {bounds}{OPTIONAL.get(name, '')}, got {value!r}")

    # ---- the matrix the boosters read

    def attach(self, nodes: NodeInputs) -> Hurdle:
        self.nodes = nodes
        return self

    def matrix(self, user: np.ndarray, fund: np.ndarray, ctx_cat: np.ndarray, ctx_num: np.ndarray,
               seq: np.ndarray) -> np.ndarray:
        """One row per delivery: categorical codes of user, fund and context, then their numeric features, then the
        behaviour counts (:meth:`behaviour_counts`)."""
        n = self.nodes
        return np.hstack([n.user_cat.numpy()[user], n.fund_cat.numpy()[fund], ctx_cat, n.user_num.numpy()[user],
                          n.fund_num.numpy()[fund], ctx_num,
                          self.behaviour_counts(seq, n.fund_cat.numpy()[fund, self.fund_key])]).astype(np.float32)

    def behaviour_counts(self, seq: np.ndarray, fund_code: np.ndarray) -> np.ndarray:
        """``(len(seq), 2 · n_actions)``: events of each action in the sequence, then those on the fund ``fund_code``
        (one code per row; ``seq`` holds (fund, action) codes, −1 pads)."""
        action = seq[:, :, 1]
        on_fund = seq[:, :, 0] == fund_code[:, None]
        codes = np.arange(self.n_actions)
        of_action = action[:, :, None] == codes
        return np.hstack([of_action.sum(axis=1), (of_action & on_fund[:, :, None]).sum(axis=1)])

    def _batch_matrix(self, batch: dict[str, Tensor]) -> np.ndarray:
        return self.matrix(*(batch[k].numpy() for k in ("user", "fund", "ctx_cat", "ctx_num", "seq")))

    # ---- fitting

    def fit(self, train: dict[str, Tensor], valid: dict[str, Tensor] | None = None, seed: int = 0,
            progress: bool = False) -> History:
        """Fit both stages on the deliveries ``train`` (:meth:`InputEncoders.rows`): the hurdle (conversion), then the
        amount, each stopping early on its rows of ``valid`` when there are any; then the smearing factor. Returns one
        record per stage (trees kept, validation loss; the conversion's validation AUC too) and the factor.
        ``progress``: a line every few seconds of a long stage (:class:`BoostingProgress`)."""
        n = self.nodes
        categorical = list(range(n.user_cat.shape[1] + n.fund_cat.shape[1] + train["ctx_cat"].shape[1]))
        sets = [(self._batch_matrix(rows), rows["convert"].numpy() > 0, rows["v"].numpy().astype(np.float64))
                for rows in ((train, valid) if valid is not None else (train,))]
        records, trees = [], {"convert": self.params["n_trees"],
                              "amount": self.params["n_trees_amount"] or self.params["n_trees"]}
        for stage, objective, metric in (("convert", "binary", "binary_logloss"), ("amount", "regression", "l2")):
            # the conversion on every delivery, the log amount on the converted ones
            data = [(x, convert.astype(np.float64)) if stage == "convert" else (x[convert], v[convert])
                    for x, convert, v in sets]
            train_set = lgb.Dataset(*data[0], categorical_feature=categorical, free_raw_data=False)
            valid_sets = [lgb.Dataset(*d, reference=train_set) for d in data[1:] if len(d[1])]
            callbacks = [lgb.early_stopping(self.params["early_stopping_rounds"], verbose=False)] if valid_sets else []
            if progress:
                callbacks.append(BoostingProgress(f"hurdle {stage}", trees[stage]))
            booster = lgb.train(self._lgb_params(objective, seed), train_set, num_boost_round=trees[stage],
                                valid_sets=valid_sets, callbacks=callbacks)
            self.boosters[stage] = booster
            record = {"stage": stage, "trees": booster.best_iteration or booster.num_trees(), "chosen": True}
            if valid_sets:
                record["valid_loss"] = float(booster.best_score["valid_0"][metric])
            if valid_sets and stage == "convert":  # what the label-leak guard reads (promokit.value.leaks)
                record["valid_auc"] = auc(data[1][1], booster.predict(data[1][0], num_iteration=record["trees"]))
            records.append(record)
        # held-out residuals where the validation rows hold conversions, else the training residuals
        held_out = len(sets) > 1 and sets[-1][1].any()
        if self.params["smearing"] is not None:
            self.smearing = float(self.params["smearing"])
        else:
            x, convert, v = sets[-1] if held_out else sets[0]
            residual = v[convert] - self.boosters["amount"].predict(x[convert])
            self.smearing = float(np.mean(np.exp(residual)))
        records.append({"stage": "smearing", "factor": self.smearing, "chosen": True})
        self._chosen = {"n_trees": records[0]["trees"], "n_trees_amount": records[1]["trees"],
                        **({"smearing": self.smearing} if held_out and self.params["smearing"] is None else {})}
        return History(epochs=records, best_epoch=-1, monitor="loss", unit="boosted stage")

    @property
    def chosen_params(self) -> dict:
        """What the last :meth:`fit` chose, to refit every delivery with (:mod:`promokit.training.refit`): the trees
        each stage kept (``n_trees``: the conversion's, ``n_trees_amount``) and, when it was estimated on the
        validation rows' residuals, the smearing factor (``smearing``)."""
        return dict(self._chosen)

    def _lgb_params(self, objective: str, seed: int) -> dict:
        p = self.params
        return {"objective": objective, "num_leaves": p["num_leaves"], "min_child_samples": p["min_child_samples"],
                "bagging_fraction": p["subsample"], "bagging_freq": 1, "feature_fraction": p["colsample"],
                "learning_rate": p["learning_rate"], "seed": seed, "deterministic": True,
                "num_threads": p["threads"], "verbosity": -1}

    # ---- inference: ESDPM's calls

    def eval(self) -> Hurdle:
        return self

    def __call__(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        return self.outputs(self._batch_matrix(batch))

    def outputs(self, x: np.ndarray) -> dict[str, Tensor]:
        """``p_ctcvr`` = P(convert), ``mu`` = E[v | convert], ``amount_if_convert`` = exp(μ) · S − 1 and
        ``etv`` = their product, per row of the matrix ``x``."""
        p = self.boosters["convert"].predict(x)
        mu = self.boosters["amount"].predict(x)
        amount = np.maximum(np.exp(np.minimum(mu, 60.0)) * self.smearing - 1.0, 0.0)
        return {name: torch.from_numpy(np.ascontiguousarray(value, dtype=np.float64)) for name, value in
                (("p_ctcvr", p), ("mu", mu), ("amount_if_convert", amount), ("etv", p * amount))}

    def pair_outputs(self, user: Tensor, seq: Tensor, ctx_cat: Tensor, ctx_num: Tensor, n_funds: int
                     ) -> dict[str, Tensor]:
        """Outputs of every user × fund × context row, user-major, then fund, then context (as ESDPM's)."""
        n_users, n_contexts = len(user), len(ctx_cat)
        pairs = n_funds * n_contexts
        fund = np.tile(np.repeat(np.arange(n_funds), n_contexts), n_users)
        x = self.matrix(np.repeat(user.numpy(), pairs), fund, np.tile(ctx_cat.numpy(), (n_users * n_funds, 1)),
                        np.tile(ctx_num.numpy(), (n_users * n_funds, 1)), np.repeat(seq.numpy(), pairs, axis=0))
        return self.outputs(x)

    # ---- the model directory

    def model_texts(self) -> dict[str, str]:
        texts = {f"{PREFIX}_{stage}.txt": booster.model_to_string() for stage, booster in self.boosters.items()}
        return {**texts, f"{PREFIX}.json": json.dumps({"smearing": self.smearing})}

    def load_texts(self, model_dir: str | os.PathLike, prefix: str = PREFIX) -> Hurdle:
        """The boosters and S from ``model_dir``, whose files start with ``prefix`` (:data:`FORMER_PREFIX` in a
        directory written while the floor was called ``two-part``)."""
        folder = Path(model_dir)
        self.boosters = {stage: lgb.Booster(model_file=str(folder / f"{prefix}_{stage}.txt"))
                         for stage in ("convert", "amount")}
        self.smearing = float(json.loads((folder / f"{prefix}.json").read_text(encoding="utf-8"))["smearing"])
        return self
