"""The public real data sets of the guides and benchmarks, each read as the tables its domain's estimator fits
(``pk.datasets.load_kuairand(folder)`` …); the ``promokit conversion kuairand`` and ``promokit voucher amexpert``
commands write the same tables as files.

- :func:`load_kuairand` — KuaiRand-Pure (a folder of its CSVs): the conversion table, one row per impression, and a
  report; :func:`write_kuairand` writes it with its feature spec.
- :func:`load_amexpert` — AmExpert 2019 (a folder of its CSVs): :class:`~promokit.voucher.contract.VoucherTables`
  and a report; :func:`convert_amexpert` writes them.
- :func:`load_cdnow` — CDNOW (``CDNOW_master.txt`` or its folder): the value study's
  :class:`~promokit.value.contract.ValueTables` (:func:`read_cdnow` reads the purchase log alone).

None is downloaded: each reads the files as their publishers give them. Loads on first use (PEP 562).
"""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "load_kuairand": "promokit.conversion.kuairand",
    "write_kuairand": "promokit.conversion.kuairand",
    "load_amexpert": "promokit.voucher.amexpert",
    "convert_amexpert": "promokit.voucher.amexpert",
    "load_cdnow": "promokit.value.cdnow",
    "read_cdnow": "promokit.value.cdnow",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted(__all__)
