"""GBDT baseline of the DMBGN paper (section 4.2): LightGBM on the dense features only."""

from __future__ import annotations

import os
from pathlib import Path

import lightgbm as lgb
import numpy as np

from promokit.voucher.models.base import FieldLayout
from promokit.training.solve_progress import BoostingProgress


class GBDT:
    """Gradient-boosted trees on the profile and voucher features (no user_id / voucher_id, as in the
    paper); profile categoricals are LightGBM categorical features. The model is stored in LightGBM's text
    format (no pickle).

    The number of trees is chosen by early stopping on the validation rows' ``early_stopping_metric``, AUC by
    default: the validation period of a time split has its own redemption rate (AmExpert 2019: 0.94 % in
    training, 4.63 % in validation), and the validation logloss then mostly measures that calibration gap
    rather than the ranking; on AmExpert it stopped after 1–2 trees and test AUC swung 0.50–0.72 over seeds.

    Inputs are the estimator's arrays ``{"cat": (N, F) int64, "num": (N, D) float32}``.

    Paper: the GBDT baseline of §4.2 of the DMBGN paper (``dmbgn-voucher-redemption.txt``), "used to assess the
    performance of non deep-learning algorithms. Similarly, only dense features are used" (no equation of its own):
    p(x) = σ(Σ_m f_m(x)) over the trees f_m, fitted to the logloss of eq. (8).

    Args:
        layout: where the id columns sit, which the trees leave out (:class:`FieldLayout`).
        n_trees: the most trees.
        num_leaves: the most leaves per tree.
        min_child_samples: the fewest rows per leaf.
        subsample: the fraction of rows each tree samples.
        colsample: the fraction of features each tree samples.
        learning_rate: the boosting shrinkage.
        early_stopping_rounds: rounds without a validation improvement before training stops.
        early_stopping_metric: LightGBM's validation metric for early stopping (``"auc"``, ``"binary_logloss"``).
        seed: LightGBM's seed.
        threads: LightGBM's threads (0: at most 2).

    Shapes:
        - **input:** :meth:`fit` and :meth:`predict` take ``{"cat": (N, F) int64, "num": (N, D) float32}``;
          :meth:`fit` also labels ``redeemed`` ``(N,)``
        - **output:** :meth:`predict` gives ``p_redeem`` ``(N,)``, a NumPy array
    """

    labels = ("redeemed",)
    outputs = ("p_redeem",)
    file = "gbdt.txt"

    def __init__(self, layout: FieldLayout, n_trees: int = 300, num_leaves: int = 31, min_child_samples: int = 20,
                 subsample: float = 0.8, colsample: float = 0.8, learning_rate: float = 0.05,
                 early_stopping_rounds: int = 20, early_stopping_metric: str = "auc", seed: int = 0,
                 threads: int = 0):
        self.dense_fields = list(layout.dense_fields)
        self.params = dict(n_trees=n_trees, num_leaves=num_leaves, min_child_samples=min_child_samples,
                           subsample=subsample, colsample=colsample, learning_rate=learning_rate,
                           early_stopping_rounds=early_stopping_rounds,
                           early_stopping_metric=early_stopping_metric, seed=seed, threads=threads)
        self.booster: lgb.Booster | None = None

    def _lgb_params(self) -> dict:
        p = self.params
        return {"objective": "binary", "num_leaves": p["num_leaves"], "min_child_samples": p["min_child_samples"],
                "bagging_fraction": p["subsample"], "bagging_freq": 1, "feature_fraction": p["colsample"],
                "learning_rate": p["learning_rate"], "metric": p["early_stopping_metric"], "seed": p["seed"],
                "deterministic": True, "num_threads": p["threads"] or min(os.cpu_count() or 1, 2), "verbosity": -1}

    def _matrix(self, x: dict[str, np.ndarray]) -> np.ndarray:
        return np.hstack([x["cat"][:, self.dense_fields].astype(np.float32), x["num"]])

    def fit(self, x: dict[str, np.ndarray], labels: dict[str, np.ndarray],
            valid: tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None = None, progress: bool = False) -> GBDT:
        """Boost on the training sessions, stopping early on ``valid`` when given; ``progress``: a line every few
        seconds of a long run (:class:`BoostingProgress`)."""
        cats = list(range(len(self.dense_fields)))
        train = lgb.Dataset(self._matrix(x), labels["redeemed"], categorical_feature=cats, free_raw_data=False)
        valid_sets, callbacks = [], []
        if valid is not None:
            valid_sets = [lgb.Dataset(self._matrix(valid[0]), valid[1]["redeemed"], reference=train)]
            callbacks = [lgb.early_stopping(self.params["early_stopping_rounds"], verbose=False)]
        if progress:
            callbacks.append(BoostingProgress("gbdt", self.params["n_trees"]))
        self.booster = lgb.train(self._lgb_params(), train, num_boost_round=self.params["n_trees"],
                                 valid_sets=valid_sets, callbacks=callbacks)
        return self

    @property
    def chosen_params(self) -> dict:
        """The trees kept by early stopping on the validation rows, to refit with."""
        return {"n_trees": self.booster.best_iteration or self.booster.num_trees()}

    def predict(self, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"p_redeem": self.booster.predict(self._matrix(x), num_iteration=self.booster.best_iteration or None)}

    def model_texts(self) -> dict[str, str]:
        return {self.file: self.booster.model_to_string()}

    def load_texts(self, model_dir: str | Path) -> GBDT:
        self.booster = lgb.Booster(model_file=str(Path(model_dir) / self.file))
        return self
