"""The examples and the README's Python example run as a user runs them (a fresh interpreter, one thread), so
neither can rot: each exits 0 and prints what it promises, and what it learns beats what it is compared with."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# each runs a whole example in a fresh interpreter: 15–30 s on 2 cores
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300


def run(args: list[str], tmp_path: Path) -> str:
    """stdout of ``python args…`` run in ``tmp_path`` with one thread and ``tmp_path`` as the temporary folder."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{args[0]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def number(pattern: str, text: str, group: int = 1) -> float:
    found = re.search(pattern, text)
    assert found, f"no line matching {pattern!r} in:\n{text}"
    return float(found.group(group).replace(",", ""))


def example(name: str, tmp_path: Path) -> tuple[str, Path]:
    out = tmp_path / "out"
    return run([str(ROOT / "examples" / name), str(out)], tmp_path), out


def test_conversion(tmp_path):
    text, out = example("conversion.py", tmp_path)
    assert number(r"esm2 +CVR AUC (\d\.\d+)", text) > 0.65
    assert (out / "esm2" / "config.json").is_file() and (out / "esm2-report" / "report.md").is_file()


def test_voucher(tmp_path):
    text, out = example("voucher.py", tmp_path)
    assert number(r"dmbgn +AUC (\d\.\d+)", text) > 0.6
    assert (out / "dmbgn" / "config.json").is_file()


def test_incentive(tmp_path):
    text, out = example("incentive.py", tmp_path)
    assert number(r"AUC_c (\d\.\d+)", text) > 0.7
    assert (out / "scores" / "customers.parquet").is_file() and (out / "model" / "config.json").is_file()


@pytest.mark.extra("allocation")
def test_value(tmp_path):
    text, out = example("value.py", tmp_path)
    floor = number(r"hurdle .*true value of its plan ([\d,]+)", text)
    assert floor > number(r"by random scores ([\d,]+)", text)
    assert floor < number(r"by the true ETVs ([\d,]+)", text)
    assert (out / "esdpm" / "plan" / "plan.parquet").is_file()


def test_end_to_end_writes_into_a_temporary_folder_by_default(tmp_path):
    text = run([str(ROOT / "examples" / "end_to_end.py")], tmp_path)
    pattern = r"true per customer: plan (\S+) redemptions, (\S+) spent; random values (\S+) redemptions, (\S+) spent"
    plan_redemptions, plan_spend, random_redemptions, random_spend = (number(pattern, text, k) for k in range(1, 5))
    assert plan_redemptions / plan_spend > random_redemptions / random_spend  # more redemptions per coupon spent
    assert re.search(r"gnn-hazard against logging: .* responses \(DR\)", text), text
    written = Path(re.search(r"everything written to (\S+)", text).group(1))
    assert written.parent == tmp_path and (written / "campaign" / "campaign.json").is_file()


def test_readme_example(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1, "the README has one Python example"
    assert len(blocks[0].strip().splitlines()) < 20, "the README's example stays short"
    script = tmp_path / "readme_example.py"
    script.write_text(blocks[0], encoding="utf-8")
    text = run([str(script)], tmp_path)
    assert number(r"AUC_c (\d\.\d+)", text) > 0.7
    assert re.search(r"lagrange: objective [\d,.]+", text) and "gnn-hazard against logging" in text, text
