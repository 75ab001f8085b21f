"""The commands' options as typer's annotated types: :mod:`~promokit.cli.options.common`, those every domain shares,
and one module per domain (``conversion``, ``voucher``, ``incentive``, ``value``) with its own and the flags its
library errors name. Torch-free, so ``promokit --help`` loads no model."""
