"""GBDT baseline of the ESM² paper: LightGBM for CTR on impressions and CVR on clicked impressions."""

from __future__ import annotations

import os
from pathlib import Path

import lightgbm as lgb
import numpy as np

from promokit.data.encoders import EncodedFeatures
from promokit.training.solve_progress import BoostingProgress


class GBDT:
    """Two gradient-boosted tree models composed like DNN: p_ctcvr = p_ctr · p_cvr.

    Defaults are the paper's section 4.1.4: 150 trees of depth 8, at least 20 rows per leaf, row and
    feature sampling 0.6, logistic loss. Categorical fields are LightGBM categorical features. With validation rows
    each task stops early; ``n_trees_cvr`` sets the CVR task's trees apart from ``n_trees`` (a refit keeps each
    task's).
    Models are stored as LightGBM's text format (no pickle).

    Paper: the GBDT baseline of §4.1.3 (settings §4.1.4) of "Entire Space Multi-Task Modeling via Post-Click
    Behavior Decomposition for Conversion Rate Prediction" (ESM²,
    [Wen et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401443)), which gives no equation for it: each task
    is a gradient-boosted sum of trees with a logistic link, p^t(x) = σ(Σ_m f^t_m(x)), trained on its path
    (impression → click for CTR, click → purchase for CVR), and p^ctcvr = p^ctr · p^cvr.

    Args:
        n_trees: the most trees per task (the CTR task's, and the CVR task's unless ``n_trees_cvr``).
        max_depth: the trees' depth.
        num_leaves: the most leaves per tree.
        min_child_samples: the fewest rows per leaf.
        subsample: the fraction of rows each tree samples.
        colsample: the fraction of features each tree samples.
        learning_rate: the boosting shrinkage.
        early_stopping_rounds: rounds without a validation improvement before a task stops.
        seed: LightGBM's seed.
        threads: LightGBM's threads (0: every core).
        n_trees_cvr: the CVR task's trees apart from ``n_trees`` (``None``: ``n_trees``).

    Shapes:
        - **input:** :meth:`fit` and :meth:`predict` take ``EncodedFeatures``: ``categorical`` ``(N, F)`` int64 and
          ``numeric`` ``(N, D)``; :meth:`fit` also labels ``click`` and ``purchase`` ``(N,)``
        - **output:** :meth:`predict` gives ``p_ctr``, ``p_cvr``, ``p_ctcvr`` ``(N,)`` NumPy arrays
    """

    labels = ("click", "purchase")
    outputs = ("p_ctr", "p_cvr", "p_ctcvr")
    files = {"ctr": "gbdt_ctr.txt", "cvr": "gbdt_cvr.txt"}

    def __init__(self, n_trees: int = 150, max_depth: int = 8, num_leaves: int = 63, min_child_samples: int = 20,
                 subsample: float = 0.6, colsample: float = 0.6, learning_rate: float = 0.1,
                 early_stopping_rounds: int = 20, seed: int = 0, threads: int = 0, n_trees_cvr: int | None = None):
        self.params = dict(n_trees=n_trees, n_trees_cvr=n_trees_cvr, max_depth=max_depth, num_leaves=num_leaves,
                           min_child_samples=min_child_samples, subsample=subsample, colsample=colsample,
                           learning_rate=learning_rate, early_stopping_rounds=early_stopping_rounds, seed=seed,
                           threads=threads)
        self.boosters: dict[str, lgb.Booster] = {}

    def _lgb_params(self) -> dict:
        p = self.params
        return {"objective": "binary", "max_depth": p["max_depth"], "num_leaves": p["num_leaves"],
                "min_child_samples": p["min_child_samples"], "bagging_fraction": p["subsample"], "bagging_freq": 1,
                "feature_fraction": p["colsample"], "learning_rate": p["learning_rate"], "seed": p["seed"],
                "deterministic": True, "num_threads": p["threads"] or os.cpu_count() or 1, "verbosity": -1}

    @staticmethod
    def _matrix(x: EncodedFeatures) -> np.ndarray:
        return np.hstack([x.categorical.astype(np.float32), x.numeric])

    def fit(self, x: EncodedFeatures, labels: dict[str, np.ndarray],
            valid: tuple[EncodedFeatures, dict[str, np.ndarray]] | None = None, progress: bool = False) -> GBDT:
        """Boost the CTR trees on every row and the CVR trees on the clicked ones, each stopping early on its rows of
        ``valid`` when given; ``progress``: a line every few seconds of a long run (:class:`BoostingProgress`)."""
        matrix = self._matrix(x)
        cats = list(range(x.categorical.shape[1]))
        clicked = labels["click"] == 1
        tasks = {"ctr": (slice(None), "click"), "cvr": (clicked, "purchase")}
        for task, (rows, label) in tasks.items():
            train = lgb.Dataset(matrix[rows], labels[label][rows], categorical_feature=cats, free_raw_data=False)
            callbacks, valid_sets = [], []
            if valid is not None:
                vx, vl = valid
                vrows = slice(None) if task == "ctr" else vl["click"] == 1
                valid_sets = [lgb.Dataset(self._matrix(vx)[vrows], vl[label][vrows], reference=train)]
                callbacks = [lgb.early_stopping(self.params["early_stopping_rounds"], verbose=False)]
            trees = (task == "cvr" and self.params["n_trees_cvr"]) or self.params["n_trees"]
            if progress:
                callbacks.append(BoostingProgress(f"gbdt {task}", trees))
            self.boosters[task] = lgb.train(self._lgb_params(), train, num_boost_round=trees,
                                            valid_sets=valid_sets, callbacks=callbacks)
        return self

    @property
    def chosen_params(self) -> dict:
        """The trees each task kept (early stopping on the validation rows), to refit with."""
        kept = {task: booster.best_iteration or booster.num_trees() for task, booster in self.boosters.items()}
        return {"n_trees": kept["ctr"], "n_trees_cvr": kept["cvr"]}

    def predict(self, x: EncodedFeatures) -> dict[str, np.ndarray]:
        matrix = self._matrix(x)
        p_ctr = self.boosters["ctr"].predict(matrix)
        p_cvr = self.boosters["cvr"].predict(matrix)
        return {"p_ctr": p_ctr, "p_cvr": p_cvr, "p_ctcvr": p_ctr * p_cvr}

    def model_texts(self) -> dict[str, str]:
        return {self.files[task]: booster.model_to_string() for task, booster in self.boosters.items()}

    def load_texts(self, model_dir: str | Path) -> GBDT:
        self.boosters = {task: lgb.Booster(model_file=str(Path(model_dir) / name)) for task, name in self.files.items()}
        return self
