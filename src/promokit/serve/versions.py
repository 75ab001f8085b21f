"""The versions of a campaign directory and which one is live: what a refresh without downtime switches between.

A campaign directory serves one version at a time, its live one. The first ``campaign build`` into a directory
writes its files at the root; a build into a directory that already holds a campaign writes the new version beside
the live one, in ``versions/<model_version>/``, and leaves the live one as it is. ``live.json`` names the live
version (``{"version": …}``); without it the root's version is live. The pointer is rewritten atomically, so a
reader sees the old name or the new one, and a service follows it (:mod:`promokit.serve.refresh`).

This module reads names and folders only; loading and checking a version is :mod:`promokit.serve.campaign`'s.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from promokit.data.errors import DataError
from promokit.data.io import write_json

CONFIG = "campaign.json"
LIVE = "live.json"
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
    pointer = root / LIVE
    if pointer.is_file():
        try:
            name = json.loads(pointer.read_text(encoding="utf-8"))["version"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise DataError(f"{pointer} does not name a version ({{\"version\": …}}); name one with "
                            f"promokit.serve.campaign.activate") from None
        return str(name)
    return root_version(root)


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


def point_live(root: Path, name: str) -> None:
    """Make ``name`` the live version of ``root`` (atomically: a reader sees the old name or this one)."""
    write_json({"version": name}, root / LIVE)


def _version_of(config: Path) -> str | None:
    if not config.is_file():
        return None
    try:
        return str(json.loads(config.read_text(encoding="utf-8")).get("model_version", ""))
    except json.JSONDecodeError as exc:
        raise DataError(f"{config} is not valid JSON: {exc}") from None
