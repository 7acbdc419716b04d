"""Loading a checkpoint never runs code from it. A ``.ckpt`` is a pickle: loaded the default way, a
crafted file runs any command it names the moment it is opened. Every checkpoint a user passes is
opened with PyTorch's restricted unpickler (``torch.load(weights_only=True)``: tensors, containers,
plain values), which is all our checkpoints hold; a file needing any other type is refused, naming
the file and the type, unless ``trust_checkpoint=true``. Lightning reads it with
``weights_only=True`` too (:func:`lightning_weights_only`)."""

from __future__ import annotations

import io
import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

from ablate.errors import UserError

_trusted = False


class UnsafeCheckpointError(UserError):
    """The checkpoint needs a type the restricted unpickler does not build."""


class NotACheckpointError(UserError):
    """The file is not one ``torch.save`` writes (a text file, an image): named as such, not as a
    file needing unsafe types or a damaged checkpoint, which the unpickler would make of its bytes."""


# what torch.save writes first: a zip entry (its format since 1.6; a truncated file keeps it) or a
# pickle's PROTO opcode (the legacy format)
TORCH_HEADERS = (b"PK\x03\x04", b"\x80")


def check_torch_file(path: Path) -> None:
    """:class:`NotACheckpointError` when the non-empty file ``path`` begins with neither header."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head and not head.startswith(TORCH_HEADERS):
        raise NotACheckpointError(
            f"{path} is not an ablate checkpoint: it is not a file torch.save writes (it begins with {head!r}, "
            "not a zip archive or a pickle)"
        )


def trust_checkpoints(trust: bool) -> None:
    """``trust_checkpoint=true`` of the running script: load files that need other types (runs their code)."""
    global _trusted
    _trusted = bool(trust)


def trusted() -> bool:
    """The running script was told ``trust_checkpoint=true``."""
    return _trusted


def lightning_weights_only() -> bool:
    """What to pass as ``weights_only`` to Lightning's loads (``Trainer.fit``, ``load_from_checkpoint``)."""
    return not _trusted


def load(path: str | os.PathLike[str], mmap: bool = True) -> Any:
    """``torch.load`` of a user's checkpoint on the CPU, restricted unless trusted, memory-mapped unless
    in torch's legacy format. :class:`NotACheckpointError` for a file torch did not write,
    :class:`UnsafeCheckpointError` for one needing a type outside the restricted set; any other
    failure propagates for the caller to describe."""
    import torch  # here, not at the top: ablate.cli imports this module before any checkpoint is read

    path = Path(path)
    if path.is_file():
        check_torch_file(path)
    mmap = mmap and zipfile.is_zipfile(path)
    if _trusted:
        return torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        raise _refusal(str(path), err) from None


def load_bytes(data: io.BytesIO, what: str) -> Any:
    """One ``torch.save``'d value in memory (a sharded checkpoint's piece), restricted unless trusted;
    ``what`` names it in a refusal."""
    import torch

    try:
        return torch.load(data, map_location="cpu", weights_only=not _trusted)
    except pickle.UnpicklingError as err:
        raise _refusal(what, err) from None


def _refusal(what: str, err: pickle.UnpicklingError) -> UnsafeCheckpointError:
    found = re.search(r"GLOBAL ([\w.]+)", str(err))
    needs = f"the type {found.group(1)}" if found else "a type outside tensors, containers and plain values"
    return UnsafeCheckpointError(
        f"{what} needs {needs} to be loaded, which would run code from the file: refused. Our checkpoints never "
        "need it. If you trust the file's source, load it with trust_checkpoint=true"
    )
