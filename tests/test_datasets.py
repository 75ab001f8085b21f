"""``pk.datasets``: the shared real sets load as their domains' tables (skipped where ../shared/data lacks them)."""

from pathlib import Path

import pytest

import promokit as pk
from promokit.value.contract import ValueTables
from promokit.voucher.contract import VoucherTables

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def needs(name: str):
    return pytest.mark.skipif(not (SHARED / name).is_dir(), reason=f"no {SHARED / name}")


def test_the_loaders_are_public_names_and_each_module_exports_them():
    from promokit.datasets import convert_amexpert, load_amexpert, load_cdnow, load_kuairand, read_cdnow, write_kuairand

    assert pk.datasets.load_kuairand is load_kuairand and pk.datasets.load_cdnow is load_cdnow
    assert {f.__module__ for f in (load_kuairand, write_kuairand, load_amexpert, convert_amexpert, load_cdnow,
                                   read_cdnow)} == {"promokit.conversion.kuairand", "promokit.voucher.amexpert",
                                                    "promokit.value.cdnow"}


@needs("kuairand_pure")
def test_kuairand_loads_as_a_conversion_table():
    table, report = pk.datasets.load_kuairand(SHARED / "kuairand_pure")
    assert {"user_id", "item_id", "click", "purchase"} <= set(table.columns) and len(table) == report.rows > 0


@needs("amexpert2019")
def test_amexpert_loads_as_voucher_tables():
    tables, report = pk.datasets.load_amexpert(SHARED / "amexpert2019")
    assert isinstance(tables, VoucherTables) and len(tables.sessions) == report.rows > 0


@needs("cdnow")
def test_cdnow_loads_as_value_tables():
    tables = pk.datasets.load_cdnow(SHARED / "cdnow")
    assert isinstance(tables, ValueTables) and len(tables.deliveries) == len(tables.users) > 20_000


def test_a_missing_folder_is_a_one_line_error(tmp_path):
    for load in (pk.datasets.load_kuairand, pk.datasets.load_amexpert, pk.datasets.load_cdnow):
        with pytest.raises(pk.DataError) as error:
            load(tmp_path / "nowhere")
        assert "\n" not in str(error.value) and "nowhere" in str(error.value)
