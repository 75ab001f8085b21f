"""Defaults of the neural models of every domain, chosen on validation data (KuaiRand-Pure's validation day
with like and with follow as the conversion, AmExpert 2019's validation campaigns, the synthetic worlds) rather
than copied from the papers, whose settings were tuned for 10⁸–10⁹ rows. The comparison is in
docs/training.md#defaults; each paper's own setting stays available as parameters."""

#: 16-dimensional embeddings, towers (256, 128, 64), dropout 0.3.
NET = {"emb_dim": 16, "hidden": (256, 128, 64), "dropout": 0.3}
#: Adam's learning rate.
LR = 1e-3
#: Lazy L2 on embedding rows (``TrainConfig.embedding_decay``), at ``EMBEDDING_DECAY_ROWS`` training rows.
EMBEDDING_DECAY = 10.0
#: The training rows the decay was chosen at (KuaiRand-Pure's four training days); larger tables get it in
#: proportion weaker (``TrainConfig.decay_rows``, ``promokit.training.embedding_decay_for``).
EMBEDDING_DECAY_ROWS = 57_741
#: The wide term of every neural model that has one (``promokit.nn.WideTerm``): the solved ``lr`` floor as a fixed
#: offset of each logit. Jointly trained wide terms and none scored below the floor on KuaiRand-Pure's validation
#: day (docs/training.md#the-wide-term).
WIDE = "offset"
