"""The model directory: ``config.json`` + weights + encoders, written atomically, loaded without pickle.

Layout::

    model_dir/
      config.json          # what the model is: {"model": name, "params": {...}, ...}
      encoder.json         # fitted feature encoders (plain JSON)
      weights.safetensors  # neural weights (or other files a model writes, e.g. LightGBM text models)
      history.json         # training history
      training_ids.npy     # the hashes of the ids of the subjects trained on (promokit.data.ids.id_hashes)
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from promokit import __version__
from promokit.data.errors import DataError
from promokit.data.io import write_npy
from promokit.data.uris import as_path, local_dir

CONFIG = "config.json"
#: The layout of the model directories this promokit writes, recorded in ``config.json`` as ``format``: 2 since the
#: hold-out, the refit and the training subjects are kept; a directory without it is format 1 (read with the
#: defaults of what it lacks). A directory of a later format is refused: a newer promokit wrote it.
MODEL_FORMAT = 2
WEIGHTS = "weights.safetensors"
TRAINING_IDS = "training_ids.npy"


class ModelDirWriter:
    """Collect files in a temporary directory and move it onto the target only when all are written."""

    def __init__(self, path: str | os.PathLike):
        self.path = local_dir(path, "path")

    def __enter__(self) -> ModelDirWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", dir=self.path.parent))
        return self

    def json(self, name: str, obj) -> None:
        (self.tmp / name).write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")

    def text(self, name: str, text: str) -> None:
        (self.tmp / name).write_text(text, encoding="utf-8")

    def array(self, name: str, array: np.ndarray) -> None:
        write_npy(array, self.tmp / name)

    def weights(self, state_dict: dict[str, torch.Tensor], name: str = WEIGHTS) -> None:
        # from CPU tensors: a model trained on one device loads on any (read_weights loads to the CPU)
        save_file({k: v.detach().cpu().contiguous() for k, v in state_dict.items()}, str(self.tmp / name))

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        old = None
        if self.path.exists():
            old = self.path.with_name(f".{self.path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(self.path, old)
        os.replace(self.tmp, self.path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return False


def write_model_dir(path: str | os.PathLike, config: dict, encoder: dict, net, history: dict | None = None,
                    extra: dict[str, object] | None = None, training_ids: np.ndarray | None = None) -> None:
    """Write a whole model directory atomically: ``config.json``, ``encoder.json``, ``history.json`` (when
    given), the ``extra`` JSON files by name, ``training_ids.npy`` (when given: the hashes of the training
    subjects' ids, :func:`promokit.data.ids.id_hashes`), and the network — a torch module's state dict as
    safetensors, or the text files of ``net.model_texts()`` (e.g. LightGBM's text models)."""
    with ModelDirWriter(path) as out:
        out.json(CONFIG, {**config, "format": MODEL_FORMAT})
        out.json("encoder.json", encoder)
        if history is not None:
            out.json("history.json", history)
        if training_ids is not None:
            out.array(TRAINING_IDS, training_ids)
        for name, obj in (extra or {}).items():
            out.json(name, obj)
        if isinstance(net, torch.nn.Module):
            out.weights(net.state_dict())
        else:
            for name, text in net.model_texts().items():
                out.text(name, text)


def read_json(model_dir: str | os.PathLike, name: str = CONFIG) -> dict:
    """A JSON file of a model directory; ``config.json`` of a later :data:`MODEL_FORMAT` is a DataError."""
    path = Path(model_dir) / name
    if not path.exists():
        raise DataError(f"{as_path(model_dir)}: not a promokit model directory ({name} is missing)")
    data = json.loads(path.read_text(encoding="utf-8"))
    if name == CONFIG and data.get("format", 1) > MODEL_FORMAT:
        raise DataError(f"{as_path(model_dir)}: a model directory of format {data['format']}, written by a newer "
                        f"promokit ({data.get('promokit')}); this one ({__version__}) reads formats up to "
                        f"{MODEL_FORMAT}: upgrade promokit")
    return data


def read_model_config(model_dir: str | os.PathLike, task: str) -> dict:
    """``config.json`` of a model directory written for ``task`` (``conversion``, ``voucher`` …), or a DataError."""
    config = read_json(model_dir)
    if config.get("task") != task:
        raise DataError(f"{model_dir}: holds a {config.get('task')!r} model, not a {task} model")
    return config


def read_training_ids(model_dir: str | os.PathLike) -> np.ndarray | None:
    """The hashes of the ids of the subjects the model in ``model_dir`` was trained on (sorted distinct uint64, as
    :func:`promokit.data.ids.id_hashes` gives them, for :func:`~promokit.data.ids.share_in`), or ``None`` when the
    directory does not record them (a format-1 directory may not). A DataError when ``model_dir`` is not a model
    directory or its file is not such hashes."""
    if not (Path(model_dir) / CONFIG).exists():
        raise DataError(f"{as_path(model_dir)}: not a promokit model directory ({CONFIG} is missing)")
    path = Path(model_dir) / TRAINING_IDS
    if not path.exists():
        return None
    try:
        hashes = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot be read as the training subjects' hashes ({exc})") from None
    if hashes.dtype != np.uint64 or hashes.ndim != 1 or np.any(hashes[1:] <= hashes[:-1]):
        raise DataError(f"{path}: not the training subjects' hashes (a sorted array of distinct uint64; got "
                        f"{hashes.dtype} of shape {hashes.shape})")
    return hashes


def read_weights(model_dir: str | os.PathLike, name: str = WEIGHTS) -> dict[str, torch.Tensor]:
    path = Path(model_dir) / name
    if not path.exists():
        raise DataError(f"{model_dir}: {name} is missing")
    return load_file(str(path), device="cpu")


def load_weights(net: torch.nn.Module, model_dir: str | os.PathLike, name: str = WEIGHTS) -> None:
    """Load ``weights.safetensors`` into ``net``, or a one-line DataError when they do not fit the network that
    ``config.json`` describes (a directory edited by hand, or written by a promokit whose models differ)."""
    try:
        net.load_state_dict(read_weights(model_dir, name))
    except RuntimeError as exc:
        first = str(exc).split("\n\t", 2)[1] if "\n\t" in str(exc) else str(exc)
        raise DataError(f"{model_dir}: the weights do not fit the network its config.json describes "
                        f"({first.strip()[:200]}…); retrain the model with this promokit version") from None
