"""``python -m promokit.cli``: the ``promokit`` command."""

from promokit.cli import main

main()
