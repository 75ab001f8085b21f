"""The report writer: one folder with report.md, report.json and PNG figures."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from promokit.data.io import atomic_path, write_json, write_text


@dataclass
class Report:
    """Sections of tables and text, figures and machine-readable data, written together by :meth:`write`."""

    title: str
    sections: list[tuple[str, str | pd.DataFrame]] = field(default_factory=list)
    data: dict = field(default_factory=dict)
    figures: dict[str, object] = field(default_factory=dict)  # file stem → matplotlib Figure

    def add(self, heading: str, body: str | pd.DataFrame) -> Report:
        self.sections.append((heading, body))
        return self

    def markdown(self) -> str:
        lines = [f"# {self.title}", ""]
        for heading, body in self.sections:
            lines += [f"## {heading}", "", markdown_table(body) if isinstance(body, pd.DataFrame) else body, ""]
        lines += [f"![{stem}]({stem}.png)\n" for stem in self.figures]
        return "\n".join(lines)

    def write(self, out_dir: str | os.PathLike) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for stem, figure in self.figures.items():
            with atomic_path(out / f"{stem}.png") as tmp:
                figure.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
        write_json(_clean(self.data), out / "report.json")
        write_text(self.markdown(), out / "report.md")
        return out


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


def _clean(value):
    """JSON has no NaN: write it as null."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
