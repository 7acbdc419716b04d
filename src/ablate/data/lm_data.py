"""Language-modelling corpora: where each one's text comes from (the rest is
:class:`ablate.data.lm_datamodule.LMDataModule`'s): :class:`TinyShakespeare`, :class:`WikiText2`
and :class:`WikiText103` (Merity et al. 2016), :class:`TextFiles` (any UTF-8 files, one per split).
``conf/data/*.yaml`` and every stored checkpoint name these classes here (``_target_``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from ablate.config import targets
from ablate.data.cache import file_fingerprint
from ablate.data.lm_datamodule import LMDataModule
from ablate.data.sources import (
    DataNotFoundError,
    download_url,
    load_hub_dataset,
    missing_file_message,
    read_utf8,
    resolve_local,
)
from ablate.data.text_stream import SplitText


def _read(path: Path) -> str:
    return read_utf8(path)  # a non-UTF-8 file is named in the error


def _rows(dataset: Any, column: str) -> Iterator[str]:
    """The ``column`` of each row of a (streamed) dataset split."""
    for row in dataset:
        yield row[column]


class TinyShakespeare(LMDataModule):
    """Tiny Shakespeare (Karpathy's char-rnn corpus, 1.1 MB), cut at character offsets by ``splits``:
    ``nanogpt`` (test = validation), ``disjoint`` (a held-out test passage) or ``blocks``: segments
    with their last 10% held out, test and validation alternating, so a verdict is not about one
    passage (issue 34); ``heldout_blocks`` per split (null: 4). Downloaded from :attr:`URL` if missing."""

    name = "tinyshakespeare"
    URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
    RELPATH = "tinyshakespeare/input.txt"
    TRAIN_FRACTION = 0.9
    VAL_END_FRACTION = 0.95  # splits=disjoint: validation ends here, test is the rest
    HELDOUT_BLOCKS = 4  # splits=blocks: held-out blocks per split (test and validation alternating, one per segment)
    CONFIG_CHOICES = targets.TinyShakespeare.CONFIG_CHOICES  # declared with its keys, read without torch

    def __init__(self, *args: Any, splits: str = "nanogpt", heldout_blocks: int | None = None, **kwargs: Any) -> None:
        valid = self.CONFIG_CHOICES["splits"]
        if splits not in valid:  # before anything is read or downloaded
            raise ValueError(f"splits={splits!r} is invalid: one of {', '.join(valid)}")
        if heldout_blocks is not None and splits != "blocks":
            raise ValueError(f"heldout_blocks={heldout_blocks} applies to splits=blocks only, not splits={splits}")
        if heldout_blocks is not None and not (
            isinstance(heldout_blocks, int) and not isinstance(heldout_blocks, bool) and heldout_blocks >= 1
        ):
            raise ValueError(f"heldout_blocks={heldout_blocks!r}: give a whole number of blocks >= 1 (or null: 4)")
        super().__init__(*args, **kwargs)
        self.splits = splits
        self.heldout_blocks = heldout_blocks or self.HELDOUT_BLOCKS

    @classmethod
    def validation_as_test(cls, config: Mapping[str, Any]) -> str | None:
        """With nanoGPT's splits the test text is the validation text (see the base class)."""
        if config.get("splits", "nanogpt") != "nanogpt":
            return None
        return (
            "data.splits=nanogpt: Tiny Shakespeare's test split is its validation text "
            "(data.splits=disjoint holds out a test text)"
        )

    def input_file(self) -> Path:
        """Path of ``input.txt``, downloading it into ``data_dir`` when missing."""
        return resolve_local(self.data_dir, self.RELPATH) or download_url(self.URL, self.data_dir / self.RELPATH)

    def source_key(self) -> Any:
        files = file_fingerprint({"input": self.input_file()}, memo_dir=self.cache_dir)
        # nanogpt keeps the key it always had, so its caches (and every number made with them) stay valid;
        # so do 4 held-out blocks, the layout before their number was an option
        if self.splits == "nanogpt":
            return files
        key: dict[str, Any] = {"input": files, "splits": self.splits}
        if self.splits == "blocks" and self.heldout_blocks != self.HELDOUT_BLOCKS:
            key["heldout_blocks"] = self.heldout_blocks
        return key

    def block_cuts(self, n: int) -> dict[str, list[tuple[int, int]]]:
        """``splits=blocks``: the character ranges of each split in a text of ``n`` characters."""
        segments = 2 * self.heldout_blocks
        edges = [n * k // segments for k in range(segments + 1)]
        cuts: dict[str, list[tuple[int, int]]] = {"train": [], "val": [], "test": []}
        for k in range(segments):
            start, end = edges[k], edges[k + 1]
            held = start + int((end - start) * self.TRAIN_FRACTION)
            cuts["train"].append((start, held))
            cuts["test" if k % 2 == 0 else "val"].append((held, end))
        return cuts

    def split_blocks(self) -> dict[str, list[SplitText]]:
        if self.splits != "blocks":
            return {}
        path = self.input_file()
        text = _read(path)
        cuts = self.block_cuts(len(text))
        return {
            split: [SplitText.from_string(text[a:b], f"{path} (characters {a}-{b})") for a, b in cuts[split]]
            for split in ("val", "test")
        }

    def split_texts(self) -> dict[str, SplitText]:
        # 1.1 MB, split by characters: read whole (a byte offset could cut a character)
        path = self.input_file()
        text = _read(path)
        if self.splits == "blocks":
            cuts = self.block_cuts(len(text))
            return {
                split: SplitText.from_string(
                    "".join(text[a:b] for a, b in ranges), f"{path} ({split}: {len(ranges)} blocks)"
                )
                for split, ranges in cuts.items()
            }
        n_train = int(len(text) * self.TRAIN_FRACTION)
        train = SplitText.from_string(text[:n_train], f"{path} (first 90%)")
        if self.splits == "nanogpt":
            val = SplitText.from_string(text[n_train:], f"{path} (last 10%)")
            return {"train": train, "val": val, "test": val}
        n_val = int(len(text) * self.VAL_END_FRACTION)
        val = SplitText.from_string(text[n_train:n_val], f"{path} (90%-95%)")
        return {"train": train, "val": val, "test": SplitText.from_string(text[n_val:], f"{path} (last 5%)")}


class WikiText(LMDataModule):
    """WikiText (Merity et al. 2016): from one of the file sets :attr:`LOCAL_NAMES` in
    ``{data_dir}/{LOCAL_DIR}/`` when there, else the raw version from the Hugging Face Hub."""

    LOCAL_DIR: ClassVar[str]
    HUB_PATH: ClassVar[str] = "Salesforce/wikitext"
    HUB_CONFIG: ClassVar[str]
    LOCAL_NAMES: ClassVar[tuple[dict[str, str], ...]] = (
        {"train": "train.txt", "val": "valid.txt", "test": "test.txt"},
        {"train": "wiki.train.tokens", "val": "wiki.valid.tokens", "test": "wiki.test.tokens"},
        {"train": "wiki.train.raw", "val": "wiki.valid.raw", "test": "wiki.test.raw"},
    )
    _HUB_SPLITS: ClassVar[dict[str, str]] = {"train": "train", "val": "validation", "test": "test"}

    def local_alternative(self) -> str:
        """Human-readable description of the local files that replace the Hub download."""
        sets = " or ".join(", ".join(names.values()) for names in self.LOCAL_NAMES)
        return f"put {sets} in the folder {(self.data_dir / self.LOCAL_DIR).absolute()}"

    def local_files(self) -> dict[str, Path] | None:
        """The local split files, or ``None`` when there are none (then the Hub is used)."""
        folder = self.data_dir / self.LOCAL_DIR
        partial: list[str] = []
        for names in self.LOCAL_NAMES:
            found = {split: resolve_local(folder, name) for split, name in names.items()}
            if all(found.values()):
                return found  # type: ignore[return-value]
            partial += [names[s] for s, p in found.items() if p is None and any(found.values())]
        if partial:
            # Some files are there: a half-copied folder is a mistake worth reporting rather
            # than silently downloading the corpus instead.
            raise DataNotFoundError(
                missing_file_message(", ".join(partial), folder, reason=f"{self.name} needs all three splits")
            )
        return None

    def source_key(self) -> Any:
        files = self.local_files()
        return file_fingerprint(files, memo_dir=self.cache_dir) if files else f"hub:{self.HUB_PATH}/{self.HUB_CONFIG}"

    def split_texts(self) -> dict[str, SplitText]:
        files = self.local_files()
        if files:
            return {split: SplitText.from_file(path) for split, path in files.items()}
        # streamed: nothing is downloaded or held whole beyond the chunk being tokenised
        ds = load_hub_dataset(
            self.HUB_PATH, self.HUB_CONFIG, local_alternative=self.local_alternative(), streaming=True
        )
        # One row per line of the original file; blank lines are empty rows.
        return {
            split: SplitText.from_rows(
                partial(_rows, ds[hub_split], "text"), f"hub:{self.HUB_PATH}/{self.HUB_CONFIG}/{hub_split}"
            )
            for split, hub_split in self._HUB_SPLITS.items()
        }


class WikiText2(WikiText):
    """WikiText-2 (about 2M training words)."""

    name = "wikitext2"
    LOCAL_DIR = "wikitext-2"
    HUB_CONFIG = "wikitext-2-raw-v1"


class WikiText103(WikiText):
    """WikiText-103 (about 103M training words; the Hub download is about 300 MB)."""

    name = "wikitext103"
    LOCAL_DIR = "wikitext-103"
    HUB_CONFIG = "wikitext-103-raw-v1"


class TextFiles(LMDataModule):
    """Any UTF-8 plain-text files, one per split (``test_path`` None: test = validation), looked up
    under ``data_dir`` first, then the working directory."""

    name = "text"

    def __init__(
        self,
        train_path: str | os.PathLike[str],
        val_path: str | os.PathLike[str],
        test_path: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.paths = {"train": Path(train_path), "val": Path(val_path), "test": Path(test_path or val_path)}

    @classmethod
    def validation_as_test(cls, config: Mapping[str, Any]) -> str | None:
        """Without ``test_path`` the test split is the validation file (see the base class)."""
        if config.get("test_path"):
            return None
        return "data.test_path is null: the test split is the validation file (data.test_path=... holds one out)"

    def files(self) -> dict[str, Path]:
        """Absolute paths of the split files; :class:`DataNotFoundError` names a missing one."""
        found = {}
        for split, path in self.paths.items():
            what = f"data.{split}_path"
            hit = resolve_local(self.data_dir, path, what) or resolve_local(Path.cwd(), path, what)
            if hit is None:
                where = path if path.is_absolute() else self.data_dir / path
                raise DataNotFoundError(missing_file_message(f"{split} text", where))
            found[split] = hit.absolute()
        return found

    def source_key(self) -> Any:
        # Full paths: two user files may share name and content, and be meant as different corpora.
        return file_fingerprint(self.files(), full_paths=True, memo_dir=self.cache_dir)

    def split_texts(self) -> dict[str, SplitText]:
        return {split: SplitText.from_file(path) for split, path in self.files().items()}
