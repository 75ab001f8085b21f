"""The report writer: one folder with report.md, report.json, PNG figures and, on request, report.html."""

from __future__ import annotations

import html as html_text
import math
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from promokit.data.io import atomic_path, write_json, write_text
from promokit.data.uris import local_dir


@dataclass
class Report:
    """Sections of tables and text, figures and machine-readable data, written together by :meth:`write`. A
    section may name figures (stems of :attr:`figures`) to show right after it, beside the numbers they explain;
    the others come at the end."""

    title: str
    sections: list[tuple[str, str | pd.DataFrame, tuple[str, ...]]] = field(default_factory=list)
    data: dict = field(default_factory=dict)
    figures: dict[str, object] = field(default_factory=dict)  # file stem → matplotlib Figure

    def add(self, heading: str, body: str | pd.DataFrame, figures: tuple[str, ...] = ()) -> Report:
        self.sections.append((heading, body, tuple(figures)))
        return self

    def _trailing(self) -> list[str]:
        placed = {stem for *_, figures in self.sections for stem in figures}
        return [stem for stem in self.figures if stem not in placed]

    def markdown(self) -> str:
        lines = [f"# {self.title}", ""]
        for heading, body, figures in self.sections:
            lines += [f"## {heading}", "", markdown_table(body) if isinstance(body, pd.DataFrame) else body, ""]
            lines += [f"![{stem}]({stem}.png)\n" for stem in figures]
        lines += [f"![{stem}]({stem}.png)\n" for stem in self._trailing()]
        return "\n".join(lines)

    def html(self) -> str:
        """The same sections as one self-contained HTML page (text escaped; figures are the PNGs beside it)."""
        escape = html_text.escape
        image = lambda stem: f'<p><img src="{escape(stem)}.png" alt="{escape(stem)}"></p>'  # noqa: E731
        parts = [f"<h1>{escape(self.title)}</h1>"]
        for heading, body, figures in self.sections:
            parts.append(f"<h2>{escape(heading)}</h2>")
            parts.append(_html_table(body) if isinstance(body, pd.DataFrame) else _html_text(body))
            parts += [image(stem) for stem in figures]
        parts += [image(stem) for stem in self._trailing()]
        return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(self.title)}</title>'
                f"<style>{_CSS}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")

    def write(self, out_dir: str | os.PathLike, html: bool = False) -> Path:
        """Write report.md, report.json and the PNGs into ``out_dir`` (and report.html when ``html``): a local folder
        (a URI is a one-line error naming ``out_dir``)."""
        out = local_dir(out_dir, "out_dir")
        out.mkdir(parents=True, exist_ok=True)
        for stem, figure in self.figures.items():
            with atomic_path(out / f"{stem}.png") as tmp:
                figure.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
        write_json(json_safe(self.data), out / "report.json")
        write_text(self.markdown(), out / "report.md")
        if html:
            write_text(self.html(), out / "report.html")
        return out


def metrics_table(metrics: dict) -> pd.DataFrame:
    """``metrics`` (name → number) as a table of ``metric`` and ``value``: a count as an int, any other number as a
    float."""
    values = [int(v) if isinstance(v, numbers.Integral) else float(v) for v in metrics.values()]
    return pd.DataFrame({"metric": list(metrics), "value": pd.Series(values, dtype=object)})


def metrics_report(title: str, model: str, metrics: dict, tables: dict[str, pd.DataFrame] | None = None) -> Report:
    """An evaluation's report (``evaluate``'s report.md / report.json): the ``model``'s ``metrics``
    (:func:`metrics_table`) and the ``tables`` that break them down (calibration by decile …), each a section."""
    tables = tables or {}
    report = Report(title, data={"model": model, "metrics": metrics,
                                 **{name: table.to_dict(orient="records") for name, table in tables.items()}})
    report.add("Metrics", metrics_table(metrics))
    for name, table in tables.items():
        report.add(name.replace("_", " ").capitalize(), table)
    return report


def count(value: float) -> str:
    """A count for people: thousands separated, no decimals (— for a missing value)."""
    return "—" if value is None or not math.isfinite(value) else f"{value:,.0f}"


def money(value: float, decimals: int = 2) -> str:
    """An amount of money with the currency's ``decimals`` and thousands separated."""
    return "—" if value is None or not math.isfinite(value) else f"{value:,.{decimals}f}"


def percent(value: float, digits: int = 1, signed: bool = False) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:{'+' if signed else ''}.{digits}%}"


def markdown_table(frame: pd.DataFrame, digits: int = 4) -> str:
    """A GitHub-flavoured Markdown table; floats rounded to ``digits``."""
    def cell(value) -> str:
        if isinstance(value, float):
            return "—" if math.isnan(value) else f"{value:.{digits}f}"
        return str(value)

    frame = frame.reset_index() if frame.index.name else frame
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def _html_text(text: str) -> str:
    """Text as paragraphs, a block of ``- `` lines as a list."""
    escape = html_text.escape
    lines = text.splitlines()
    if lines and all(line.startswith("- ") for line in lines):
        return "<ul>" + "".join(f"<li>{escape(line[2:])}</li>" for line in lines) + "</ul>"
    return "".join(f"<p>{escape(part)}</p>" for part in text.split("\n\n"))


def _html_table(frame: pd.DataFrame, digits: int = 4) -> str:
    frame = frame.reset_index() if frame.index.name else frame
    return frame.to_html(index=False, escape=True, na_rep="—", float_format=lambda v: f"{v:.{digits}f}")


_CSS = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;font-size:13px;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
        "text-align:right}th{background:#f3f3f3}img{max-width:100%}")


def json_safe(value):
    """``value`` with every non-finite float as None: JSON has no NaN, so it is written as null."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
