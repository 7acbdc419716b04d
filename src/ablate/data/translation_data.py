"""Parallel corpora for translation (``data=`` options): where each one's text comes from; the
rest is :class:`ablate.data.translation_datamodule.TranslationDataModule`'s.

* :class:`ParallelCorpus`: named splits read from ``{data_dir}/{local_dir}/{split_file}.{lang}``
  (plain or ``.gz``) when there, else from the Hub (``hub_path``/``hub_config``): ``multi30k``,
  ``iwslt14``, ``iwslt2017``, ``wmt14``. Offline, a missing corpus names the local files instead.
* :class:`ParallelFiles` (``data=parallel``): any pair of local files per split.

``conf/data/*.yaml`` and every stored checkpoint name these classes here (``_target_``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ablate.data.cache import file_fingerprint
from ablate.data.sources import DataNotFoundError, load_hub_dataset, missing_file_message, regular_file
from ablate.data.translation_cache import SPLITS
from ablate.data.translation_datamodule import TranslationDataModule
from ablate.data.translation_text import LineSource, file_source, find_file, hub_source


class ParallelCorpus(TranslationDataModule):
    """A corpus with named splits: local files ``{local_dir}/{split_file}.{lang}`` (or ``.gz``) under
    ``data_dir`` first, the Hugging Face Hub dataset ``hub_path`` otherwise (None: local only), whose
    records are ``{"translation": {lang: text, ...}}`` or ``{lang: text, ...}``."""

    def __init__(
        self,
        name: str,
        languages: Sequence[str],
        local_dir: str,
        split_files: Mapping[str, str],
        hub_path: str | None = None,
        hub_config: str | None = None,
        hub_revision: str | None = None,
        hub_splits: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.name, self.languages = name, tuple(languages)
        super().__init__(**kwargs)
        self.local_dir = local_dir
        self.split_files = dict(split_files)
        self.hub_path, self.hub_config, self.hub_revision = hub_path, hub_config, hub_revision
        self.hub_splits = dict(hub_splits or {"train": "train", "val": "validation", "test": "test"})

    def _stems(self) -> dict[str, str]:
        return {f"{split}.{lang}": f"{self.split_files[split]}.{lang}" for split in SPLITS for lang in self.languages}

    def local_files(self) -> dict[str, Path] | None:
        folder = self.data_dir / self.local_dir
        found = {key: find_file(folder, stem) for key, stem in self._stems().items()}
        if all(found.values()):
            return found  # type: ignore[return-value]
        if any(found.values()) or self.hub_path is None:
            missing = [self._stems()[k] + "[.gz]" for k, p in found.items() if p is None]
            why = f"{self.name} needs every split in both languages" + (
                "" if self.hub_path else " (no Hub copy is configured)"
            )
            raise DataNotFoundError(missing_file_message(", ".join(missing), folder, reason=why))
        return None

    def local_alternative(self) -> str:
        names = ", ".join(f"{stem}[.gz]" for stem in self._stems().values())
        return f"put {names} in the folder {(self.data_dir / self.local_dir).absolute()}"

    def source_key(self) -> Any:
        files = self.local_files()
        return (
            file_fingerprint(files, full_paths=True, memo_dir=self.cache_dir)
            if files
            else f"hub:{self.hub_path}/{self.hub_config}@{self.hub_revision}"
        )

    def line_sources(self) -> dict[str, dict[str, LineSource]]:
        files = self.local_files()
        if files:
            return {split: {lang: file_source(files[f"{split}.{lang}"]) for lang in self.languages} for split in SPLITS}
        kwargs = {"revision": self.hub_revision} if self.hub_revision else {}
        assert self.hub_path is not None  # local_files() found nothing and a Hub path is configured
        ds = load_hub_dataset(self.hub_path, self.hub_config, local_alternative=self.local_alternative(), **kwargs)
        return {
            split: {
                lang: hub_source(ds[self.hub_splits[split]], lang, f"{self.hub_path} {self.hub_splits[split]}")
                for lang in self.languages
            }
            for split in SPLITS
        }


class ParallelFiles(TranslationDataModule):
    """Your own parallel files (``data=parallel``): one source and one target file per split,
    plain or gzipped, one sentence per line. Relative paths are looked up under ``data_dir``
    first, then the working directory. No test files: test = validation."""

    name = "parallel"

    def __init__(
        self,
        train_src: str,
        train_tgt: str,
        val_src: str,
        val_tgt: str,
        test_src: str | None = None,
        test_tgt: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.paths = {
            "train.src": train_src,
            "train.tgt": train_tgt,
            "val.src": val_src,
            "val.tgt": val_tgt,
            "test.src": test_src or val_src,
            "test.tgt": test_tgt or val_tgt,
        }

    def files(self) -> dict[str, Path]:
        found = {}
        for key, path in self.paths.items():
            p = Path(path).expanduser()
            candidates = (p,) if p.is_absolute() else (self.data_dir / p, Path.cwd() / p)
            hit = next((c for c in candidates if regular_file(c, f"data.{key.replace('.', '_')}")), None)
            if hit is None:
                raise DataNotFoundError(
                    missing_file_message(f"{key} ({path})", p if p.is_absolute() else self.data_dir / p)
                )
            found[key] = hit.absolute()
        return found

    def source_key(self) -> Any:
        return file_fingerprint(self.files(), full_paths=True, memo_dir=self.cache_dir)

    def line_sources(self) -> dict[str, dict[str, LineSource]]:
        files = self.files()
        return {
            split: {
                self.src_lang: file_source(files[f"{split}.src"]),
                self.tgt_lang: file_source(files[f"{split}.tgt"]),
            }
            for split in SPLITS
        }
