"""``train --validation`` in every domain: one option, read as the library's ``fit(validation=…)`` — a number is the
fraction (0: none), other text goes to the library as given, whose one-line refusal names --validation."""

import re

import pytest
from typer.testing import CliRunner

from promokit.cli import app

runner = CliRunner()


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found, text
    return int(found[1].replace(",", ""))


def _conversion(folder):
    data = folder / "impressions.parquet"
    assert _invoke("conversion", "synth", "--out", data, "--users", 200, "--items", 100, "--impressions", 5000).exit_code == 0
    return (["conversion", "train", "--data", data, "--model", "lr"],
            lambda text: _number(r"([\d,]+) validation rows", text))


def _voucher(folder):
    world = folder / "voucher"
    assert _invoke("voucher", "synth", "--out", world, "--users", 200, "--sessions", 1500, "--vouchers", 20,
                   "--items", 200).exit_code == 0
    return (["voucher", "train", "--sessions", world / "sessions.parquet", "--items", world / "items.parquet",
             "--events", world / "events.parquet", "--model", "lr"],
            lambda text: _number(r"([\d,]+) validation sessions", text))


def _incentive(folder):
    world = folder / "incentive"
    assert _invoke("incentive", "synth", "--out", world, "--customers", 600, "--merchants", 60, "--seed", 1).exit_code == 0

    def valid(text):  # the labelled customers less those held out and those trained on
        held, labelled = (int(n.replace(",", "")) for n in re.search(r"([\d,]+) of ([\d,]+) labelled customers",
                                                                     text).groups())
        return labelled - held - _number(r"(?:selected|trained) on ([\d,]+) customers", text)

    return (["incentive", "train", "--customers", world / "customers.parquet", "--merchants",
             world / "merchants.parquet", "--edges", world / "edges.parquet", "--model", "lr"], valid)


def _value(folder):
    world = folder / "value"
    assert _invoke("value", "synth", "--out", world, "--users", 400, "--seed", 2).exit_code == 0
    return ["value", "train", "--data", world, "--model", "hurdle"], lambda text: _number(r"validated on ([\d,]+)", text)


DOMAINS = {"conversion": (_conversion, ["soon", "2024-01-01"]), "voucher": (_voucher, ["sessions.parquet"]),
           "incentive": (_incentive, ["2024-01-01", "customers.parquet"]), "value": (_value, ["soon"])}


@pytest.mark.parametrize("domain", list(DOMAINS))
def test_train_validation_takes_the_library_forms_and_refuses_in_one_line(tmp_path, domain):
    make, refused = DOMAINS[domain]
    train, validation_rows = make(tmp_path)
    for fraction, some in (("0.2", True), ("0", False)):
        result = _invoke(*train, "--validation", fraction, "--out", tmp_path / f"model-{fraction}")
        assert result.exit_code == 0, result.output
        assert (validation_rows(" ".join(result.output.split())) > 0) is some, result.output
    for text in ["1.5", *refused]:
        result = _invoke(*train, "--validation", text, "--out", tmp_path / "refused")
        errors = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert result.exit_code == 2, result.output
        assert len(errors) == 1 and "--validation" in errors[0] and "`validation`" not in result.output, result.output
        assert "Traceback" not in result.output
    for flag in ("--valid-fraction", "--valid-from", "--valid"):  # the former spellings are gone
        assert _invoke(*train, flag, "0.2", "--out", tmp_path / "old").exit_code == 2
