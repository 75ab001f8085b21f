"""The conventions every domain's commands share (docs/conventions.md): the test hold-out that ``evaluate`` scores,
label columns under the user's names (``--label ROLE=COLUMN``) and ``predict --out`` as a folder; the library's
errors about them reworded with the commands' options. Imports nothing heavy."""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path


def relabelled(label: list[str] | None, roles: tuple[str, ...], trained: dict | None) -> bool:
    """Whether ``--label`` maps a role to another column than the model was trained with (``trained``: role → column)."""
    return any((trained or {}).get(role, role) != column for role, column in (label_options(label, roles) or {}).items())


def held_out_evaluation(model, data, all_rows: bool, asked: dict | None = None):
    """What ``evaluate`` reports of a refit model's held-out rows: the metrics scored before the refit
    (:func:`promokit.training.refit.held_out_before_refit`), once :func:`held_out_rows` has checked ``data`` is what
    train was given; None with ``--all`` or when the rows are to be scored. ``asked`` (flag → whether given): the
    options that ask for other metrics than train scored, so that the refit model scores the rows again."""
    from promokit.training.refit import held_out_before_refit

    if all_rows or not (model.holdout_ or {}).get("refit"):
        return None
    held_out_rows(model, data)
    return held_out_before_refit(model, data, [flag for flag, given in (asked or {}).items() if given])


def label_options(values: list[str] | None, roles: tuple[str, ...]) -> dict[str, str] | None:
    """``--label ROLE=COLUMN`` values as role → column (None when not given), or a one-line error."""
    from promokit.data.errors import DataError

    if not values:
        return None
    labels: dict[str, str] = {}
    for value in values:
        role, sep, column = (part.strip() for part in value.partition("="))
        if not sep or not role or not column:
            raise DataError(f"--label {value!r}: give ROLE=COLUMN, e.g. --label {roles[0]}=is_{roles[0]}")
        if role not in roles:
            raise DataError(f"--label {value!r}: unknown label role {role!r}; the roles are {', '.join(roles)}")
        if role in labels:
            raise DataError(f"--label: the role {role!r} is mapped twice ({labels[role]!r} and {column!r})")
        labels[role] = column
    return labels


@contextmanager
def convention_errors():
    """Library errors name the Python arguments of the conventions: how to map a label column
    (``labels={'click': 'is_click'}``, or in a feature spec) and ``test_fraction``; a train or evaluate command says
    its options instead (``--label click=is_click``, ``--test-fraction``)."""
    import re

    from promokit.data.errors import DataError

    try:
        yield
    except DataError as exc:
        message = re.sub(r"(?:FeatureSpec\()?labels=\{'([^']+)': '([^']+)'\}\)?", r"--label \1=\2", str(exc))
        message = re.sub(r"(?<![\w-])test_fraction(=| )", lambda m: "--test-fraction" + (" " if m[1] == "=" else m[1]),
                         message)
        raise DataError(message.replace("test_fraction:", "--test-fraction:")) from None


def held_out_rows(model, data):
    """What ``evaluate`` scores by default: the rows ``model.held_out(data)`` (whatever form the domain gives them),
    or a one-line error that says --all when the model held nothing out or ``data`` is not what it was fitted on."""
    from promokit.data.errors import DataError

    if not (model.holdout_ or {}).get("test_fraction"):
        raise DataError("the model held nothing out (trained with --test-fraction 0, or before the hold-out was "
                        "kept): evaluate data it did not train on with --all")
    try:
        return model.held_out(data)
    except DataError as exc:
        message = str(exc).removeprefix("held_out: ").replace("fit was given", "train was given")
        raise DataError(message.replace("every row of new data", "every row of new data with --all")) from None


def predictions_folder(out: Path, flag: str = "--out") -> Path | None:
    """``predict --out``: a folder, whatever the domain (predictions.parquet or the domain's tables, and
    summary.json). The old form of conversion and voucher, a file ending in .parquet or .csv, is still written
    for one release with a warning: returns that file, else None."""
    if out.suffix.lower() not in (".parquet", ".csv"):
        return None
    warnings.warn(f"{flag} {out}: a file is deprecated and will be refused in the next release; {flag} is a folder "
                  f"(predictions.parquet and summary.json are written in it)", FutureWarning, stacklevel=2)
    return out
