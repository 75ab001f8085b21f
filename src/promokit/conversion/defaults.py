"""The conversion estimator's defaults, stated once: the estimator and ``fit`` take them and the command line shows
them in ``--help``. Imports nothing heavy."""

from promokit.training import defaults
from promokit.training.config import TrainConfig

#: The model ``ConversionModel()`` is, and ``conversion train`` trains, unless told otherwise.
DEFAULT_MODEL = "esm2"
#: Training defaults, chosen on validation data like the network defaults (``promokit.training.defaults``).
DEFAULT_TRAIN = TrainConfig(epochs=10, batch_size=1000, lr=defaults.LR, embedding_decay=defaults.EMBEDDING_DECAY,
                            decay_rows=defaults.EMBEDDING_DECAY_ROWS,
                            patience=2)
#: The share of the training rows (after the test hold-out) that validates when ``fit`` is given no ``validation``.
VALIDATION_FRACTION = 0.1
#: Post-click labels on unclicked rows fail the fit unless ``repair_labels`` zeroes them.
REPAIR_LABELS = False
