"""The versions of a campaign directory and which one is live: what a refresh without downtime switches between.

A campaign directory serves one version at a time, its live one. The first ``campaign build`` into a directory
writes its files at the root; a build into a directory that already holds a campaign writes the new version beside
the live one, in ``versions/<model_version>/``, and leaves the live one as it is. ``live.json`` names the live
version and numbers the switch that made it live (``{"version": …, "seq": n}``); without it the root's version is
live. The pointer is rewritten atomically, so a reader sees the old pointer or the new one, and every write takes a
lock on ``live.lock`` and numbers itself one more than the pointer it replaces: switches from any number of
processes are ordered, the last one written is live, and a service follows it (:mod:`promokit.serve.refresh`).

This module reads names and folders only; loading and checking a version is :mod:`promokit.campaign.directory`'s.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from pathlib import Path

from promokit.data.errors import DataError
from promokit.data.io import write_json

CONFIG = "campaign.json"
LIVE = "live.json"
LOCK = "live.lock"  # serialises the writers of live.json
VERSIONS = "versions"
#: What a version's name may hold when it names a folder of ``versions/``.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class UnknownVersion(DataError):
    """A version name the campaign directory does not hold."""


def root_version(root: Path) -> str | None:
    """The model version whose files are at the root of ``root``, or None when none are."""
    return _version_of(root / CONFIG)


def live_version(root: Path) -> str | None:
    """The name of the live version of the campaign directory ``root``, or None when it holds no campaign."""
    return live_pointer(root)[0]


def live_pointer(root: Path) -> tuple[str | None, int | None]:
    """The live version of ``root`` and the number of the switch that made it live: 0 without ``live.json`` (the
    root's version), None for a pointer written without one (by hand, or by a promokit before the numbering)."""
    pointer = root / LIVE
    if not pointer.is_file():
        return root_version(root), 0
    try:
        data = json.loads(pointer.read_text(encoding="utf-8"))
        name, seq = str(data["version"]), data.get("seq")
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        raise DataError(f"{pointer} does not name a version ({{\"version\": …}}); name one with "
                        f"promokit.campaign.activate_version") from None
    return name, seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def version_names(root: Path) -> list[str]:
    """Every version built in ``root``, oldest first (by when its ``campaign.json`` was written)."""
    found = {}
    if (root / CONFIG).is_file():
        found[root_version(root)] = (root / CONFIG).stat().st_mtime_ns
    if (root / VERSIONS).is_dir():
        for folder in (root / VERSIONS).iterdir():
            if (folder / CONFIG).is_file():
                found[folder.name] = (folder / CONFIG).stat().st_mtime_ns
    return sorted(found, key=found.get)


def version_folder(root: Path, name: str) -> Path:
    """The folder that holds the files of version ``name`` of ``root``."""
    versions = root / VERSIONS
    if versions.is_dir() and name in os.listdir(versions) and (versions / name / CONFIG).is_file():
        return versions / name  # a name of the listing: never a path the caller made up
    if name == root_version(root):
        return root
    built = version_names(root)
    raise UnknownVersion(f"{root} has no version {name!r}; its versions are {built[-8:]}")


def new_folder(root: Path, name: str) -> Path:
    """The folder a new version ``name`` is written to beside the live one."""
    if not NAME.fullmatch(name):
        raise DataError(f"model_version names the new version's folder in {root / VERSIONS}: letters, digits, '.', "
                        f"'_' and '-' (at most 128, not starting with a '.' or '-'); got {name!r}")
    return root / VERSIONS / name


def point_live(root: Path, name: str) -> int:
    """Make ``name`` the live version of ``root`` (atomically: a reader sees the old pointer or this one); returns
    the switch's number, one more than the pointer's (a pointer that names no version is replaced, as 0)."""
    with _locked(root / LOCK):
        try:
            seq = live_pointer(root)[1] or 0
        except DataError:
            seq = 0
        write_json({"version": name, "seq": seq + 1}, root / LIVE)
    return seq + 1


@contextmanager
def _locked(path: Path):
    """An exclusive lock on ``path`` (created if missing) for the block, across processes; on a platform without
    ``fcntl`` (Windows) the block runs unlocked."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        yield


def _version_of(config: Path) -> str | None:
    if not config.is_file():
        return None
    try:
        return str(json.loads(config.read_text(encoding="utf-8")).get("model_version", ""))
    except json.JSONDecodeError as exc:
        raise DataError(f"{config} is not valid JSON: {exc}") from None
