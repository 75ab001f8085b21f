"""The voucher demo's and bench's training settings, torch-free so that ``promokit voucher bench --help`` shows them."""

from __future__ import annotations

from dataclasses import replace

from promokit.voucher.defaults import DEFAULT_TRAIN

#: The estimator's defaults, stopping after one bad epoch to fit the demo's 5-minute budget on 2 cores.
DEMO_TRAIN = replace(DEFAULT_TRAIN, epochs=8, patience=1)
