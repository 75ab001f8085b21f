"""The value estimator's defaults, stated once: the estimator and its use cases take them and the command line shows
them in ``--help``. Imports nothing heavy."""

from promokit.training.config import TrainConfig

#: The paper's §5.1 optimiser: Adam, batch 512, early stopping on the validation loss.
DEFAULT_TRAIN = TrainConfig(epochs=10, batch_size=512, lr=1e-3, patience=2)
#: The model a :class:`~promokit.value.estimator.ValueModel` is unless named.
DEFAULT_MODEL = "esdpm"
#: How fit holds deliveries out: the latest (§5.1); ``"random"`` for deliveries that share one time.
DEFAULT_SPLIT = "time"
#: The share of the deliveries left after the test that validates when ``fit`` is given no ``validation`` (§5.1).
VALIDATION_FRACTION = 0.1
#: Context rows averaged over when a user × fund pair is scored without a delivery (``score_table``).
SCORE_CONTEXTS = 4
