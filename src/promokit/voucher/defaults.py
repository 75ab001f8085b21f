"""The voucher estimator's model and training defaults, stated once: the estimator trains with them and the command
line shows them in ``--help``. Imports nothing heavy."""

from promokit.training import defaults
from promokit.training.config import TrainConfig

#: Training defaults: Adam at lr 0.001 (the paper's section 4.4 too) with lazy L2 on the embedding rows
#: (``promokit.training.defaults``), batches of 512, the epoch picked on validation AUC (a later period's
#: redemption rate shifts, and its logloss follows the shift).
DEFAULT_TRAIN = TrainConfig(epochs=10, batch_size=512, lr=defaults.LR, embedding_decay=defaults.EMBEDDING_DECAY,
                            decay_rows=defaults.EMBEDDING_DECAY_ROWS,
                            patience=2, monitor="auc")
#: The model ``VoucherModel`` (and ``promokit voucher train``) fits when none is named.
DEFAULT_MODEL = "din"
