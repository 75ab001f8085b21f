"""The incentive estimator's defaults, stated once: the estimator trains with them and the command line shows them in
``--help``. Imports nothing heavy."""

from promokit.training.config import TrainConfig

#: The epoch is picked on the customers' validation log-likelihood (eq. 9): the merchants' squared error of a few
#: hundred heavy-tailed share ratios jumps between epochs and, in the joint loss, stopped some runs after one epoch.
DEFAULT_TRAIN = TrainConfig(epochs=30, batch_size=512, lr=1e-3, lr_decay=0.95, patience=3,
                            monitor="customer_loglik")
#: The share of the nodes left after the test nodes that picks the epoch (``fit(validation=None)``).
DEFAULT_VALIDATION = 0.1
#: The model ``IncentiveModel()`` fits: the paper's GNN with piecewise hazard regression.
DEFAULT_MODEL = "gnn-hazard"
