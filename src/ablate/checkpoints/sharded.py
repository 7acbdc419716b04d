"""A sharded FSDP checkpoint (``state_dict_type=sharded``), a folder read without running code from it.

Lightning 2.6 writes ``last.ckpt/``: ``meta.pt`` (all but weights and optimiser states, by rank 0
after the shards), ``.metadata`` (the distributed checkpoint's (DCP) index) and the pieces
``__<rank>_<i>.distcp``. DCP reads the index with ``pickle.load`` and values with
``torch.load(weights_only=False)``: a crafted folder runs any code it names. So :func:`load` reads
the index with an unpickler of DCP's index types only, values with torch's restricted unpickler,
and checks that each piece lies in the folder, in a file long enough, written before ``meta.pt``
(else the save was cut short and may mix two steps). Own code: DCP has no restricted reader.
"""

from __future__ import annotations

import io
import os
import pickle
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ablate.checkpoints import safe_load
from ablate.errors import UserError

META_FILE = "meta.pt"  # lightning.fabric.utilities.load._METADATA_FILENAME
INDEX_FILE = ".metadata"  # torch.distributed.checkpoint.filesystem._metadata_fn
WEIGHTS_PREFIX = "model."  # Lightning saves {"model": state_dict, "optimizer_0": ..., ...}
OPTIMIZER_KEY = re.compile(r"^(optimizer_\d+)\.")

# what DCP's index pickles: its own record types, torch's shape, dtypes and layouts, a path
_INDEX_TYPES = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata",
        "MetadataIndex",
        "StorageMeta",
        "TensorProperties",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"Path", "PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"},
    "collections": {"OrderedDict"},
}


class ShardedCheckpointError(UserError, ValueError):
    """A sharded checkpoint folder that is incomplete, damaged or needs code to be read."""


class _IndexUnpickler(pickle.Unpickler):
    """Builds DCP's index types and nothing else (the restriction the Python docs describe for
    ``find_class``): a reference to any other global is refused by name."""

    def find_class(self, module: str, name: str) -> Any:
        import torch

        if name in _INDEX_TYPES.get(module, ()) or (
            module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        ):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"GLOBAL {module}.{name}")


def read_index(path: Path) -> Any:
    """The folder's DCP index (``.metadata``), read with :class:`_IndexUnpickler` (with plain
    ``pickle`` where the user trusts the checkpoint: ``trust_checkpoint=true``)."""
    from torch.distributed.checkpoint.metadata import Metadata

    index_file = path / INDEX_FILE
    if not index_file.is_file():
        raise ShardedCheckpointError(
            f"{path} is a folder without {INDEX_FILE}: not a sharded checkpoint (Lightning's FSDP writes {INDEX_FILE}, "
            f"{META_FILE} and one shard per rank into it), or its first save was cut short; not resumed"
        )
    try:
        with open(index_file, "rb") as f:
            # trust_checkpoint=true: the user vouches for the folder, as for a file (ablate.checkpoints.safe_load)
            index = pickle.load(f) if safe_load.trusted() else _IndexUnpickler(f).load()
    except pickle.UnpicklingError as err:
        found = re.search(r"GLOBAL ([\w.]+)", str(err))
        if not found:
            raise ShardedCheckpointError(f"{index_file} is damaged ({str(err)[:200]}); not resumed") from None
        raise safe_load.UnsafeCheckpointError(
            f"{index_file} needs the type {found.group(1)} to be loaded, which would run code from the file: refused. "
            "A sharded checkpoint's index never needs it. If you trust the folder's source, load it with "
            "trust_checkpoint=true"
        ) from None
    except Exception as err:
        raise ShardedCheckpointError(
            f"{index_file} is damaged or truncated ({type(err).__name__}: {str(err)[:200]}); not resumed"
        ) from None
    fields = (getattr(index, "storage_data", None), getattr(index, "state_dict_metadata", None))
    if not isinstance(index, Metadata) or not all(isinstance(f, Mapping) for f in fields):
        raise ShardedCheckpointError(f"{index_file} is not a distributed checkpoint's index; not resumed")
    return index


def read_meta(path: Path) -> dict[str, Any]:
    """``meta.pt``: the checkpoint less its weights and optimiser states, with the restricted unpickler."""
    meta_file = path / META_FILE
    if not meta_file.is_file():
        raise ShardedCheckpointError(
            f"{path} holds no {META_FILE}: its save was cut short (rank 0 writes {META_FILE} after every rank's "
            "shards), or it is not a sharded checkpoint; not resumed. Resume from an earlier checkpoint of the run, or "
            "remove the folder to start over"
        )
    try:
        meta = safe_load.load(meta_file)
    except safe_load.UnsafeCheckpointError:
        raise
    except Exception as err:
        raise ShardedCheckpointError(
            f"{meta_file} is corrupt or truncated ({type(err).__name__}: {str(err)[:200]}); not resumed"
        ) from None
    if not isinstance(meta, dict):
        raise ShardedCheckpointError(f"{meta_file} holds a {type(meta).__name__}, not a checkpoint's dict; not resumed")
    return meta


def check_pieces(path: Path, index: Any) -> None:
    """Every piece the index names lies in a file of the folder (no other path), long enough for
    it, stored as written (no storage transform: Lightning uses none), and written before
    ``meta.pt`` (else the save that wrote it was cut short; see the module)."""
    meta_written = (path / META_FILE).stat().st_mtime_ns
    files: dict[str, int] = {}
    for key, info in index.storage_data.items():
        name = str(getattr(info, "relative_path", ""))
        fqn = getattr(key, "fqn", key)
        if not name or Path(name).name != name or name in (".", "..", META_FILE, INDEX_FILE):
            raise ShardedCheckpointError(f"{path}: {INDEX_FILE} places {fqn} in {name!r}, not a shard of the folder")
        if getattr(info, "transform_descriptors", None):
            raise ShardedCheckpointError(
                f"{path}: {fqn} is stored with the transforms {list(info.transform_descriptors)}, which Lightning's FSDP "
                "never writes; refused"
            )
        end = int(info.offset) + int(info.length)
        files[name] = max(files.get(name, 0), end)
    for name, end in sorted(files.items()):
        piece = path / name
        if not piece.is_file():
            raise ShardedCheckpointError(f"{path}: the shard {name} that {INDEX_FILE} names is missing; not resumed")
        stat = piece.stat()
        if stat.st_size < end:
            raise ShardedCheckpointError(
                f"{path}: the shard {name} is truncated ({stat.st_size:,} bytes; its index needs {end:,}); not resumed"
            )
    for name in [INDEX_FILE, *sorted(files)]:
        if (path / name).stat().st_mtime_ns > meta_written:
            raise ShardedCheckpointError(
                f"{path}: {name} was written after {META_FILE}, so the save that wrote it was cut short and the folder "
                "may mix two steps; not resumed. Resume from an earlier checkpoint of the run"
            )


def read_values(path: Path, index: Any) -> dict[str, Any]:
    """Every value entry of the index (``BytesStorageMetadata``: what is not a tensor), each loaded
    with torch's restricted unpickler (:func:`ablate.checkpoints.safe_load.load_bytes`)."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    values: dict[str, Any] = {}
    for key, info in index.storage_data.items():
        fqn = str(getattr(key, "fqn", key))
        if not isinstance(index.state_dict_metadata.get(fqn), BytesStorageMetadata):
            continue
        try:
            with open(path / str(info.relative_path), "rb") as f:
                f.seek(int(info.offset))
                piece = io.BytesIO(f.read(int(info.length)))
            values[fqn] = safe_load.load_bytes(piece, f"{path}: its entry {fqn}")
        except safe_load.UnsafeCheckpointError:
            raise
        except Exception as err:
            raise ShardedCheckpointError(
                f"{path}: its entry {fqn} is damaged ({type(err).__name__}: {str(err)[:200]}); not resumed"
            ) from None
    return values


def read_weights(path: Path, index: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    """The model's weights (the index's ``model.*`` entries), read by DCP through the checked index
    on this process alone: ``name -> tensor`` as in a checkpoint file's ``state_dict``."""
    import warnings

    import torch
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint import load as dcp_load
    from torch.distributed.checkpoint.metadata import StorageMeta, TensorStorageMetadata

    class CheckedReader(FileSystemReader):
        """DCP's reader, given the index read by :func:`read_index` instead of unpickling it again."""

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            if getattr(index, "storage_meta", None) is None:
                index.storage_meta = StorageMeta()
            index.storage_meta.load_id = self.load_id
            return index

    tensors = {
        fqn[len(WEIGHTS_PREFIX) :]: torch.empty(tuple(md.size), dtype=md.properties.dtype)
        for fqn, md in index.state_dict_metadata.items()
        if fqn.startswith(WEIGHTS_PREFIX) and isinstance(md, TensorStorageMetadata)
    }
    if tensors:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # DCP's note that it reads in one process: what is meant here
                dcp_load({"model": tensors}, storage_reader=CheckedReader(path), no_dist=True)
        except Exception as err:
            raise ShardedCheckpointError(
                f"{path}: its weights cannot be read ({type(err).__name__}: {str(err)[:300]}); not resumed"
            ) from None
    others = {k[len(WEIGHTS_PREFIX) :]: v for k, v in values.items() if k.startswith(WEIGHTS_PREFIX)}
    return {**tensors, **others}


def load(path: str | os.PathLike[str], weights: bool = True) -> dict[str, Any]:
    """A sharded folder as a checkpoint file reads: ``meta.pt``'s contents, the weights as
    ``state_dict`` (not with ``weights=False``) and as ``optimizer_states`` one
    ``{"sharded": "optimizer_0", "entries": n}`` per optimiser (Lightning's FSDP resume reads them).
    :class:`ShardedCheckpointError` or ``UnsafeCheckpointError`` for a bad folder."""
    path = Path(path)
    meta = read_meta(path)
    index = read_index(path)
    checkpoint = {k: v for k, v in meta.items() if k not in ("state_dict", "optimizer_states")}
    try:
        check_pieces(path, index)
        values = read_values(path, index)
        if weights:
            checkpoint["state_dict"] = read_weights(path, index, values)
        # optimizer_<i> -> the entries the index holds: the optimiser states, left on disk
        optimizers = Counter(m.group(1) for fqn in index.state_dict_metadata if (m := OPTIMIZER_KEY.match(str(fqn))))
    except UserError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as err:  # fields of other types
        raise ShardedCheckpointError(
            f"{path}: its {INDEX_FILE} is not a distributed checkpoint's index as Lightning writes it "
            f"({type(err).__name__}: {str(err)[:200]}); not resumed"
        ) from None
    if optimizers:
        checkpoint["optimizer_states"] = [
            {"sharded": name, "entries": optimizers[name]}
            for name in sorted(optimizers, key=lambda n: int(n.rsplit("_", 1)[1]))
        ]
    return checkpoint
