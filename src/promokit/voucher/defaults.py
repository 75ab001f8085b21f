"""The voucher estimator's model and training defaults, stated once: the estimator trains with them and the command
line shows them in ``--help``. Imports nothing heavy."""

from promokit.training import defaults
from promokit.training.config import TrainConfig

#: Training defaults: Adam at lr 0.001 (the paper's section 4.4 too), batches of 512, the epoch picked on validation
#: AUC (a later period's redemption rate shifts, and its logloss follows the shift), and no lazy L2 on the embedding
#: rows: the other domains' λ = 10 (``promokit.training.defaults``) held DMBGN's category and scope embeddings near
#: zero, and DMBGN learnt the scope of the voucher world with it a third as well; on AmExpert no voucher network
#: scored lower without it (benchmarks/comparisons.md#voucher-dmbgn-against-lr).
DEFAULT_TRAIN = TrainConfig(epochs=10, batch_size=512, lr=defaults.LR, embedding_decay=0.0, patience=2, monitor="auc")
#: The model ``VoucherModel`` (and ``promokit voucher train``) fits when none is named.
DEFAULT_MODEL = "din"
