"""The guides do what they say: every guide (README.md and docs/*.md) is run as a reader pastes it, top to bottom.

Per guide, in a fresh working folder, in the order they appear: every ``promokit …`` command of its fenced shell
blocks (```bash, ```sh, ```shell) and every ```python block, all sharing that folder, so that a guide's chain —
synth, train, predict, allocate … — works from nothing. A command or block that exits non-zero fails the guide's
test, naming the guide, the line, the command and the end of its output. ``../shared/data`` is the shared real data
beside the checkout, reachable from the working folder as it is from the checkout.

A block that cannot run here (a Ray cluster, a GPU, cloud storage, a service that stays up, a long benchmark) is
marked in the guide, on the line right before its fence::

    <!-- not run: needs a Ray cluster -->

and skipped with that reason. A command synopsis (``[--option …]``, ``a|b``) is not a shell block: it is fenced
```text. The options of every documented command, in any fenced block (run, skipped or synopsis), must be options
of that command (its ``--help``).

Speed: each command runs the installed ``promokit`` entry point (``promokit.cli:main``) with its own argv, folder
and environment, in a process forked from one that has imported promokit and its libraries once (torch, PyG,
LightGBM: seconds of imports per command otherwise); each Python block runs in such a process too, as
``__main__``. ``PROMOKIT_GUIDES_FRESH=1`` runs each in a fresh interpreter instead (the console script, ``python
block.py``), as a reader's shell would.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHARED = ROOT.parent / "shared"
SHELL = {"bash", "sh", "shell"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<info>[^`\s]*)[^`]*$")
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<reason>.+?)\s*-->\s*$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
OPTION = re.compile(r"(?<![\w/-])(--[a-z][a-z0-9-]*)")
TIMEOUT_S = 300


@dataclass
class Block:
    guide: Path
    line: int                 # of the opening fence, 1-based
    info: str                 # the fence's language
    text: str
    skip: str | None = None   # the reason of a `<!-- not run: … -->` marker

    @property
    def where(self) -> str:
        return f"{self.guide.relative_to(ROOT)}:{self.line}"


@dataclass
class Command:
    block: Block
    line: int
    text: str                                  # as written (continuations joined)
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.block.guide.relative_to(ROOT)}:{self.line}"


def blocks(guide: Path) -> list[Block]:
    """The fenced blocks of a guide, with the `not run` marker of the line before each."""
    lines = guide.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, indent = match["fence"], len(match["indent"])
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        previous = next((line for line in reversed(lines[:i]) if line.strip()), "")
        marker = NOT_RUN.match(previous)
        text = "\n".join(line[indent:] if not line[:indent].strip() else line for line in lines[i + 1:end])
        found.append(Block(guide, i + 1, match["info"].lower(), text, marker["reason"] if marker else None))
        i = end + 1
    return found


def shell_commands(block: Block) -> list[Command]:
    """The `promokit …` commands of a shell block: continuation lines joined, comments dropped, `VAR=value`
    prefixes kept as the command's environment."""
    commands, lines = [], block.text.split("\n")
    k = 0
    while k < len(lines):
        first, text = k, lines[k]
        while text.endswith("\\") and k + 1 < len(lines):
            k += 1
            text = text[:-1] + " " + lines[k].strip()
        k += 1
        words = shlex.split(text, comments=True) if text.strip() else []
        env = {}
        while words and ASSIGNMENT.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        if words and words[0] == "promokit":
            commands.append(Command(block, block.line + 1 + first, text.split(" #")[0].strip(), words, env))
    return commands


def synopsis_commands(block: Block) -> list[Command]:
    """The `promokit …` lines of a non-shell block (a synopsis), each with its indented continuation lines."""
    commands: list[Command] = []
    current = None
    for number, line in enumerate(block.text.split("\n")):
        code = re.split(r"\s#\s|\s#$", line)[0].replace("\\", " ").strip()
        if code.startswith("promokit "):
            current = Command(block, block.line + 1 + number, code)
            commands.append(current)
        elif current is not None and line[:1].isspace() and code:
            current.text += " " + code
        else:
            current = None  # a line that is not indented ends the command
    for command in commands:
        command.argv = command.text.split()
    return commands


def all_commands(guide: Path) -> list[Command]:
    return [c for b in blocks(guide) for c in (shell_commands(b) if b.info in SHELL else synopsis_commands(b))]


# -- the options of every documented command ------------------------------------------------------------------


def _cli():
    import typer

    from promokit.cli import app

    return typer.main.get_command(app)


def command_of(root, argv: list[str]):
    """The click command `promokit argv…` names, and the words of its path (an unknown sub-command: None)."""
    command, path = root, ["promokit"]
    for word in argv[1:]:
        if not hasattr(command, "get_command") or word.startswith("-"):
            break
        sub = command.get_command(command.context_class(command), word)
        if sub is None:
            if re.fullmatch(r"[a-z][a-z-]*", word):
                return None, path + [word]
            break
        command, path = sub, path + [word]
    return command, path


def options_of(command) -> set[str]:
    names = {"--help"}
    for param in command.params:
        if not getattr(param, "hidden", False):
            names.update(o for o in [*param.opts, *param.secondary_opts] if o.startswith("--"))
    return names


def wrong_options(commands: list[Command]) -> list[str]:
    """Each command `promokit …` that does not exist, and each `--option` its command does not take."""
    root, wrong = _cli(), []
    for command in commands:
        cmd, path = command_of(root, command.argv)
        if cmd is None:
            wrong.append(f"{command.where}: no command `{' '.join(path)}`")
            continue
        if hasattr(cmd, "get_command"):
            continue
        known = options_of(cmd)
        for option in OPTION.findall(" ".join(command.argv[len(path):])):
            if option not in known:
                wrong.append(f"{command.where}: `{' '.join(path)}` has no option {option} (its --help: "
                             f"{', '.join(sorted(known))})")
    return wrong


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_options_exist(guide):
    wrong = wrong_options(all_commands(guide))
    assert not wrong, "\n".join(wrong)


def test_synopses_are_read_as_commands():
    block = Block(ROOT / "README.md", 1, "text", "promokit value train --data d/ [--epochs 2\n"
                                                 "                     --no-refit]   # note --nothing\n"
                                                 "promokit allocate synth budget --out x")
    commands = synopsis_commands(block)
    assert [c.argv[:3] for c in commands] == [["promokit", "value", "train"], ["promokit", "allocate", "synth"]]
    assert OPTION.findall(commands[0].text) == ["--data", "--epochs", "--no-refit"]
    shell = Block(ROOT / "README.md", 1, "bash", "X=1 promokit a b --c 'd e' \\\n    --f g   # a comment\ncurl x")
    (only,) = shell_commands(shell)
    assert only.env == {"X": "1"} and only.argv == ["promokit", "a", "b", "--c", "d e", "--f", "g"]


def test_a_wrong_option_or_command_is_named():
    block = Block(ROOT / "README.md", 1, "text", "promokit value train --data d/ --epoch 2\n"
                                                 "promokit value tain --data d/\n"
                                                 "promokit allocate synth budget --out x --levels 1,2 --no-refit")
    wrong = wrong_options(synopsis_commands(block))
    assert len(wrong) == 3, wrong
    assert "README.md:2: `promokit value train` has no option --epoch (" in wrong[0]
    assert wrong[1] == "README.md:3: no command `promokit value tain`"
    assert "`promokit allocate synth budget` has no option --no-refit" in wrong[2]


def test_blocks_not_run_are_few_and_marked_right_before_their_fence():
    """A `not run` marker stands on the line right before a shell or Python fence (a marker anywhere else skips
    nothing), and the blocks it skips stay few: each needs what this machine lacks."""
    marked, stray = [], []
    for guide in GUIDES:
        lines = guide.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if NOT_RUN.match(line):
                after = next((l for l in lines[number + 1:] if l.strip()), "")
                fence = FENCE.match(after)
                if not fence or fence["info"].lower() not in SHELL | {"python"}:
                    stray.append(f"{guide.relative_to(ROOT)}:{number + 1}")
        marked += [b.where for b in blocks(guide) if b.skip and b.info in SHELL | {"python"}]
    assert not stray, f"`not run` markers not right before a shell or Python fence: {stray}"
    assert len(marked) <= 12, f"{len(marked)} blocks are not run: {marked}"


# -- running the guides -----------------------------------------------------------------------------------------

SERVER = r'''
import importlib, json, os, signal, sys, time, traceback
import promokit, promokit.cli  # first: it sets the OpenMP wait policy before torch loads
for module in ["torch", "torch_geometric", "lightgbm", "sklearn", "scipy", "pyarrow.parquet", "matplotlib.pyplot",
               *sorted(set(promokit._EXPORTS.values())), "promokit.experiments.conversion",  # the seconds paid once
               "promokit.experiments.voucher", "promokit.experiments.incentive", "promokit.experiments.value"]:
    try:
        importlib.import_module(module)
    except ImportError:  # an extra that is not installed: the command that needs it says so
        pass
channel = os.fdopen(int(sys.argv[1]), "w", buffering=1)
channel.write("ready\n")
for request in sys.stdin:
    job = json.loads(request)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            channel.close()
            os.chdir(job["cwd"])
            os.environ.clear(); os.environ.update(job["env"])
            import tempfile; tempfile.tempdir = None
            log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(log, 1); os.dup2(log, 2)
            null = os.open(os.devnull, os.O_RDONLY); os.dup2(null, 0)
            sys.argv = job["argv"]
            try:
                if job["kind"] == "python":
                    import runpy
                    sys.path.insert(0, os.path.dirname(job["argv"][0]))
                    runpy.run_path(job["argv"][0], run_name="__main__")
                else:
                    promokit.cli.main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if not isinstance(exc.code, (int, type(None))):
                    print(exc.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
                code = 1
        finally:
            try:
                sys.stdout.flush(); sys.stderr.flush()
            finally:
                os._exit(code)
    deadline = time.monotonic() + job["timeout"]
    status = None
    while status is None:
        done, raw, usage = os.wait4(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(raw)
        elif time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL); _, _, usage = os.wait4(pid, 0); status = "timeout"
        else:
            time.sleep(0.05)
    try:  # whatever the job started in its session (a service) ends with it
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    channel.write(json.dumps({"status": status, "cpu": usage.ru_utime + usage.ru_stime}) + "\n")
'''


class Runner:
    """Runs a command's argv or a Python file in a folder: forked from a process that imported promokit once, or,
    with PROMOKIT_GUIDES_FRESH=1, in a fresh interpreter."""

    def __init__(self):
        self.fresh = os.environ.get("PROMOKIT_GUIDES_FRESH") == "1"
        self.server, self.cpu, self.last_cpu = None, 0.0, float("nan")
        if not self.fresh:
            read, write = os.pipe()
            self.errors = tempfile.TemporaryFile("w+")
            self.server = subprocess.Popen([sys.executable, "-c", SERVER, str(write)], stdin=subprocess.PIPE,
                                           env=base_env(), pass_fds=(write,), text=True,
                                           stdout=subprocess.DEVNULL, stderr=self.errors)
            os.close(write)
            self.channel = os.fdopen(read, "r")
            if self.channel.readline().strip() != "ready":
                raise RuntimeError(f"the guide runner did not start:\n{self._errors()}")

    def _errors(self) -> str:
        self.errors.seek(0)
        return self.errors.read()[-4000:]

    def run(self, kind: str, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> int | str:
        if self.fresh:
            exe = [sys.executable] if kind == "python" else [str(Path(sys.executable).with_name("promokit"))]
            args = exe + (argv if kind == "python" else argv[1:])
            try:
                with open(log, "w") as out:
                    return subprocess.run(args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, timeout=TIMEOUT_S).returncode
            except subprocess.TimeoutExpired:
                return "timeout"
        job = {"kind": kind, "argv": argv, "cwd": str(cwd), "env": env, "log": str(log), "timeout": TIMEOUT_S}
        self.server.stdin.write(json.dumps(job) + "\n")
        self.server.stdin.flush()
        answer = self.channel.readline()
        if not answer:
            raise RuntimeError(f"the guide runner died:\n{self._errors()}")
        answer = json.loads(answer)
        self.cpu += answer["cpu"]
        self.last_cpu = answer["cpu"]
        return answer["status"]

    def close(self):
        if self.server is not None:
            self.server.stdin.close()
            self.server.wait(timeout=30)
            self.channel.close()
            self.errors.close()


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PROMOKIT_GUIDES"))}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg", COLUMNS="120",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return env


@pytest.fixture(scope="module")
def runner():
    runner = Runner()
    yield runner
    runner.close()


def _tail(log: Path, lines: int = 25) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return textwrap.indent("\n".join(text.rstrip().splitlines()[-lines:]), "    ")


def missing_extras() -> list[str]:
    """The extras not installed here (the guides use every one: ``pip install '.[all]'``)."""
    import importlib.util

    from promokit.extras import EXTRAS

    return [extra for extra, modules in EXTRAS.items() if any(importlib.util.find_spec(m) is None for m in modules)]


@pytest.mark.slow
@pytest.mark.skipif(bool(missing_extras()), reason=f"the guides use every extra: promokit[{','.join(missing_extras())}] "
                                                   "is not installed")
@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: str(p.relative_to(ROOT)))
def test_guide_runs(guide, tmp_path, runner):
    work = tmp_path / "work"
    work.mkdir()
    if SHARED.is_dir():
        (tmp_path / "shared").symlink_to(SHARED, target_is_directory=True)
    env = {**base_env(), "TMPDIR": str(tmp_path), "HOME": str(tmp_path)}
    logs = tmp_path / "logs"
    logs.mkdir()
    ran, skipped, timings, cpu_before = 0, [], [], runner.cpu
    for number, block in enumerate(blocks(guide)):
        if block.info not in SHELL | {"python"}:
            continue
        if block.skip:
            skipped.append(f"{block.where} ({block.skip})")
            continue
        if block.info == "python":
            script = work / f".guide-block-{block.line}.py"
            script.write_text(block.text + "\n", encoding="utf-8")
            steps = [("python", [str(script)], {}, block.where, block.text)]
        else:
            steps = [("promokit", c.argv, c.env, c.where, c.text) for c in shell_commands(block)]
        for kind, argv, extra, where, text in steps:
            if "../shared/data" in text and not (SHARED / "data").is_dir():
                pytest.skip(f"{where} reads ../shared/data, which is not beside the checkout")
            log = logs / f"{number}-{ran}.log"
            started = time.perf_counter()
            status = runner.run(kind, argv, work, {**env, **extra}, log)
            timings.append((time.perf_counter() - started, where, runner.last_cpu))
            ran += 1
            shown = text if kind == "promokit" else (f"(the block's line k is line {block.line} + k of the guide)\n"
                                                     + textwrap.indent(text, "    "))
            assert status == 0, (f"{where}: {'exit status ' + str(status) if status != 'timeout' else 'timed out'}"
                                 f" running\n{shown}\n  its output ends:\n{_tail(log)}")
    summary = (f"{guide.name}: {ran} run, {len(skipped)} blocks not run: {skipped}; in all "
               f"{sum(seconds for seconds, _, _ in timings):.1f} s, {runner.cpu - cpu_before:.1f} s of CPU\n"
               + "".join(f"  {seconds:6.1f} s {cpu:6.1f} s CPU  {where}\n" for seconds, where, cpu in timings))
    print(summary)
    if os.environ.get("PROMOKIT_GUIDES_TIMES"):  # a file to append each guide's times to
        with open(os.environ["PROMOKIT_GUIDES_TIMES"], "a") as times:
            times.write(summary)
