"""promokit: predict how people respond to promotions and decide who gets which promotion."""

__version__ = "0.1.0"
