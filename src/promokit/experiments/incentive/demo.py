"""The incentive demo's training settings: the defaults with fewer epochs, so the demo runs in minutes."""

from __future__ import annotations

from dataclasses import replace

from promokit.incentive.defaults import DEFAULT_TRAIN

DEMO_TRAIN = replace(DEFAULT_TRAIN, epochs=8, progress=False)
