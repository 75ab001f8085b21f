"""Money as integers of the currency's minor unit: exact to store, add and compare.

A campaign names its currency's exponent (2 for cents: 12.34 is 1234 minor units). Amounts enter as decimal text
(a JSON number, a CLI option, ``campaign.json``) and are converted exactly with :func:`to_minor`, which refuses
more decimals than the currency has rather than rounding money. They leave as :func:`to_major` floats: every
amount is below :data:`MAX_MINOR` (10¹⁵ minor units, at most 15 significant digits), so the float's shortest
text, the one JSON carries, is the exact decimal.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from promokit.data.errors import DataError

#: Money above this many minor units is refused: below it a float's shortest text is the exact decimal.
MAX_MINOR = 10**15
EXPONENTS = range(0, 7)


def to_minor(value, exponent: int, name: str) -> int:
    """``value`` (int, Decimal, decimal string or float read as its shortest text) in minor units, exactly.

    Raises :class:`DataError` naming ``name`` for a non-number, NaN/∞, a negative amount, more decimals than the
    currency has, or an amount of :data:`MAX_MINOR` minor units or more.
    """
    if isinstance(value, bool):
        raise DataError(f"{name} must be a number, got {value!r}")
    try:
        amount = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise DataError(f"{name} must be a number, got {value!r}") from None
    if not amount.is_finite():
        raise DataError(f"{name} must be a finite number, got {value!r}")
    units = amount.scaleb(exponent)
    if units != units.to_integral_value():
        raise DataError(f"{name} has more than {exponent} decimals (the currency's minor unit), got {value}")
    if units < 0 or units >= MAX_MINOR:
        raise DataError(f"{name} must be ≥ 0 and below {MAX_MINOR // 10**exponent:,} (10^15 minor units), got {value}")
    return int(units)


def to_major(units: int, exponent: int) -> float:
    """``units`` minor units as a float whose shortest text is the exact decimal (``units < MAX_MINOR``)."""
    return units / 10**exponent  # int / int is correctly rounded in Python
