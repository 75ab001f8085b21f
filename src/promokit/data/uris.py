"""Tables where platforms keep them: a table, a part or a directory of parts given as a URI (``s3://``, ``gs://``,
``abfs://``, ``hdfs://``) is read and written through a pyarrow filesystem (fsspec's, wrapped, for a scheme pyarrow
does not build here), one object at a time. Credentials come from the environment as the cloud SDKs read them
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``~/.aws``, instance
roles; ``GOOGLE_APPLICATION_CREDENTIALS``; ``AZURE_STORAGE_*``); ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``
points ``s3://`` at an S3-compatible server (MinIO, Ceph, a local test server).

Object stores have no rename, but an object appears whole or not at all, so a part is written straight to its
name. A directory of parts written to a URI is marked: ``_INCOMPLETE`` first (and any earlier ``_SUCCESS``
removed), then the parts, then ``_SUCCESS`` last, a JSON manifest of the parts' names and rows
(:func:`begin_parts`, :func:`finish_parts`). A reader of a directory URI reads exactly the parts its ``_SUCCESS``
lists (stale parts of an earlier, larger run ignored); refuses a directory with ``_INCOMPLETE`` and no
``_SUCCESS`` (a write that stopped midway); and reads every part of a directory with neither (parts another tool
wrote)."""

from __future__ import annotations

import fnmatch
import io
import json
import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path, PurePath, PurePosixPath
from urllib.parse import urlsplit

import pandas as pd

from promokit.data.errors import DataError

URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")
#: a URI after ``pathlib.Path`` collapsed its ``//`` (as a command line's path options hand it over); a scheme of
#: one letter is a Windows drive
COLLAPSED = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/([^/].*)$")
#: scheme → the storage it names
SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "abfs": "abfs", "abfss": "abfs", "az": "abfs",
           "hdfs": "hdfs"}
SUCCESS, INCOMPLETE = "_SUCCESS", "_INCOMPLETE"


def is_uri(path) -> bool:
    """True for a :class:`StoragePath`, text of the form ``scheme://…``, or a path made from one (any scheme: an
    unknown one fails when it is used, naming it)."""
    if isinstance(path, StoragePath):
        return True
    if isinstance(path, str):
        return URI.match(path) is not None
    return isinstance(path, PurePath) and COLLAPSED.match(path.as_posix()) is not None


def local_dir(path, argument: str = "out") -> Path:
    """``path`` as a local :class:`~pathlib.Path`; a URI is a one-line error naming ``argument``: what a caller
    writes there (a model directory, a report, a campaign) goes to a local folder only."""
    if is_uri(path):
        uri = as_path(path)
        raise DataError(f"`{argument}` is {uri}: this writes to a local folder only (copy it to object storage "
                        f"afterwards); tables in parts are read from and written to URIs")
    return Path(path)


@contextmanager
def scratch_dir(out, name: str):
    """A folder for a job's scratch files: ``out/name`` beside a local ``out`` (the job removes it); for a URI
    ``out``, a local temporary folder, removed afterwards (object stores hold results, not working files)."""
    if not is_uri(out):
        yield Path(out) / name
        return
    with tempfile.TemporaryDirectory(prefix=f"promokit-{name.lstrip('.')}-") as folder:
        yield Path(folder) / name


def as_path(path):
    """``path`` as a :class:`StoragePath` for a URI, else a local :class:`~pathlib.Path`."""
    if isinstance(path, StoragePath) or not is_uri(path):
        return path if isinstance(path, StoragePath) else Path(path)
    return StoragePath(path if isinstance(path, str) else COLLAPSED.sub(r"\1://\2", Path(path).as_posix()))


class StoragePath:
    """A file or folder named by a URI, with the parts of :class:`~pathlib.Path` that tables in parts use."""

    def __init__(self, uri: str):
        match = URI.match(str(uri))
        scheme = match[1].lower() if match else ""
        if scheme not in SCHEMES:
            raise DataError(f"{uri}: unknown storage scheme {scheme!r}; give a local path or a URI starting "
                            f"s3://, gs://, abfs:// or hdfs://")
        self.scheme, self.key = scheme, match[2].rstrip("/")

    def __str__(self) -> str:
        return f"{self.scheme}://{self.key}"

    def __repr__(self) -> str:
        return f"StoragePath({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, StoragePath) and str(self) == str(other)

    def __lt__(self, other) -> bool:
        return str(self) < str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __truediv__(self, name) -> StoragePath:
        return StoragePath(f"{self}/{name}")

    @property
    def name(self) -> str:
        return PurePosixPath(self.key).name

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.key).suffix

    @property
    def stem(self) -> str:
        return PurePosixPath(self.key).stem

    @property
    def parent(self) -> StoragePath:
        return StoragePath(f"{self.scheme}://{PurePosixPath(self.key).parent}")

    def with_suffix(self, suffix: str) -> StoragePath:
        return self.parent / (self.stem + suffix)

    def resolve(self) -> StoragePath:
        return self

    def mkdir(self, parents: bool = True, exist_ok: bool = True) -> None:
        """Nothing to do: in an object store a folder is the prefix of its objects' keys."""

    def exists(self) -> bool:
        return _info(self).type.name != "NotFound"

    def is_dir(self) -> bool:
        return _info(self).type.name == "Directory"

    def is_file(self) -> bool:
        return _info(self).type.name == "File"


def filesystem(path: StoragePath):
    """The pyarrow filesystem of ``path`` and the path within it."""
    import pyarrow.fs as pafs

    if SCHEMES[path.scheme] == "s3":
        return _s3(path), path.key
    try:
        return pafs.FileSystem.from_uri(str(path))
    except (OSError, ValueError, NotImplementedError) as native:  # pyarrow built without it: fsspec's, if any
        try:
            import fsspec

            fs, inner = fsspec.core.url_to_fs(str(path))
        except (ImportError, OSError, ValueError):
            raise DataError(f"{path}: no filesystem for {path.scheme}:// here: {_first_line(native)}") from None
        return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), inner


def _s3(path: StoragePath):
    import pyarrow.fs as pafs

    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    options = {}
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        options.update(endpoint_override=parts.netloc + parts.path.rstrip("/"), scheme=parts.scheme)
        region = region or "us-east-1"  # a custom endpoint has no region to look the bucket up in
    if region:
        options["region"] = region
    try:
        return pafs.S3FileSystem(**options)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot reach S3: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def storage_error(path, exc: BaseException, doing: str) -> DataError:
    """A one-line error naming the URI (never the credentials: the SDKs' messages do not carry them)."""
    return DataError(f"{path}: cannot {doing}: {_first_line(exc)}")


def _info(path: StoragePath):
    fs, inner = filesystem(path)
    try:
        return fs.get_file_info(inner)
    except OSError as exc:
        raise storage_error(path, exc, "look it up") from None


def _listing(directory: StoragePath) -> list[StoragePath]:
    import pyarrow.fs as pafs

    fs, inner = filesystem(directory)
    try:
        infos = fs.get_file_info(pafs.FileSelector(inner, recursive=True))
    except OSError as exc:
        raise storage_error(directory, exc, "list it") from None
    base = inner.rstrip("/") + "/"
    return sorted(StoragePath(f"{directory}/{info.path[len(base):]}") for info in infos
                  if info.type.name == "File" and info.path.startswith(base))


def list_files(path: StoragePath, skipped: tuple[str, ...]) -> list[StoragePath]:
    """The files of the directory ``path`` (recursively, sorted; names under it starting with ``skipped``
    left out), as its markers say to read them (see the module's text)."""
    files = _listing(path)
    names = {str(f)[len(str(path)) + 1:] for f in files}
    manifest = _manifest(path / SUCCESS) if SUCCESS in names else None
    if manifest is not None:
        listed, present = [path / name for name in manifest], set(files)
        missing = [p for p in listed if p not in present]
        if missing:
            raise DataError(f"{missing[0]}: listed in {path / SUCCESS} but missing ({len(missing)} of "
                            f"{len(listed)} parts missing)")
        return listed
    if INCOMPLETE in names and SUCCESS not in names:
        raise DataError(f"{path}: an unfinished write ({INCOMPLETE} and no {SUCCESS} there): rerun the command that "
                        f"writes it")
    return [f for f in files if not any(n.startswith(skipped) for n in str(f)[len(str(path)) + 1:].split("/"))]


def _manifest(marker: StoragePath) -> list[str] | None:
    """The parts a ``_SUCCESS`` manifest lists; None for another tool's marker (Spark's is empty)."""
    try:
        manifest = json.loads(read_bytes(marker))
    except ValueError:
        return None
    return manifest.get("parts") if isinstance(manifest, dict) else None


def glob_files(pattern: str) -> list[StoragePath]:
    """The files whose URI matches ``pattern`` (``*``, ``?``, ``[…]`` as in :mod:`fnmatch`, ``*`` crossing
    ``/``), listed under the folder before its first wildcard."""
    text = str(StoragePath(pattern))
    head = re.split(r"[*?\[]", text, maxsplit=1)[0]
    folder = StoragePath(head.rsplit("/", 1)[0])
    return [f for f in _listing(folder) if fnmatch.fnmatchcase(str(f), text)]


def read_bytes(path: StoragePath) -> bytes:
    fs, inner = filesystem(path)
    try:
        with fs.open_input_stream(inner) as stream:
            return stream.read()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as exc:
        raise storage_error(path, exc, "read it") from None


def read_parquet(path: StoragePath, columns: list[str] | None = None) -> pd.DataFrame:
    fs, inner = filesystem(path)
    try:
        return pd.read_parquet(inner, filesystem=fs, columns=columns)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None


def parquet_metadata(path: StoragePath):
    import pyarrow.parquet as pq

    fs, inner = filesystem(path)
    return pq.read_metadata(inner, filesystem=fs)


def write_bytes(data: bytes, path: StoragePath) -> StoragePath:
    """``data`` as the object ``path`` (an object appears whole or not at all)."""
    fs, inner = filesystem(path)
    try:
        with fs.open_output_stream(inner) as stream:
            stream.write(data)
    except OSError as exc:
        raise storage_error(path, exc, "write it") from None
    return path


def write_frame(frame: pd.DataFrame, path: StoragePath) -> StoragePath:
    """A table as CSV or Parquet by the suffix of ``path``, without the index."""
    buffer = io.BytesIO()
    if path.suffix == ".csv":
        frame.to_csv(buffer, index=False)
    else:
        frame.to_parquet(buffer, index=False)
    return write_bytes(buffer.getvalue(), path)


def begin_parts(directory) -> None:
    """Mark a directory URI as being written (local directories need no marker: each part is renamed into place)."""
    if is_uri(directory):
        directory = as_path(directory)
        _delete(directory / SUCCESS)
        write_bytes(b"", directory / INCOMPLETE)


def finish_parts(directory, names: list[str], rows: list[int]) -> None:
    """Mark a directory URI complete: its ``_SUCCESS`` manifest lists ``names`` (with their ``rows``) last."""
    if is_uri(directory):
        directory = as_path(directory)
        manifest = {"parts": list(names), "rows": [int(r) for r in rows]}
        write_bytes(json.dumps(manifest, indent=1).encode(), directory / SUCCESS)
        _delete(directory / INCOMPLETE)


def _delete(path: StoragePath) -> None:
    fs, inner = filesystem(path)
    try:
        fs.delete_file(inner)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise storage_error(path, exc, "delete it") from None
