"""What every corpus shares: a verified token cache built once, its loaders, and a training order
that a resumed run continues exactly (each subclass counts its position in its own units), beside
a content fingerprint that tells that the text changed (:mod:`ablate.tasks.trained_data`).
"""

from __future__ import annotations

from collections.abc import Sized
from pathlib import Path
from typing import Any, cast

import lightning as L
from torch.utils.data import DataLoader, Dataset, Sampler

from ablate.data.cache import CacheCorruptError, ensure_cache, read_meta, split_fingerprints
from ablate.data.samplers import ResumableSampler
from ablate.errors import UserError
from ablate.seeds import ORDER_VERSION


class DataOrderMismatch(UserError, RuntimeError):
    """A checkpoint trained in another version's data order: resuming it would change the order mid-run."""


class SplitTooSmallForRanks(UserError, ValueError):
    """An evaluation split with fewer items than ranks: a rank would have nothing to evaluate."""


class CachedCorpus(L.LightningDataModule):
    """Base of the LM and translation data modules (see the module docstring)."""

    seed: int = 0
    num_workers: int = 0
    datasets: dict[str, Any]
    batched = True  # False: an item is a whole batch (translation's token batches), dealt one per rank and step
    _eval_batch_size: int | None = None
    _train_sampler: ResumableSampler | None = None
    _resume_state: dict[str, int] | None = None

    # --- the cache ---------------------------------------------------------------------

    def cache_path(self) -> Path:
        """The cache folder for the current sources and tokenizer settings."""
        raise NotImplementedError

    def _build_cache(self, folder: Path) -> None:
        """Write the tokenised corpus into ``folder``, a temporary folder renamed into place once complete."""
        raise NotImplementedError

    def prepare_data(self) -> None:
        """Tokenise the corpus into the cache folder unless an intact cache exists."""
        ensure_cache(self.cache_path(), self._build_cache)

    def cache_meta(self) -> dict[str, Any]:
        """The cache's ``meta.json`` (sizes checked: a truncated token file is not trained on); a
        cache that is missing (``setup()`` called first, no Trainer) or damaged since is built
        first, or verified and rebuilt saying why."""
        folder = self.cache_path()
        try:
            return read_meta(folder)
        except CacheCorruptError:
            self.prepare_data()
            return read_meta(folder)

    def content_fingerprint(self) -> dict[str, str]:
        """Split -> the SHA-256 of its tokens as the cache records them (:func:`ablate.data.cache.split_fingerprints`)."""
        return split_fingerprints(self.cache_meta()["files"])

    # --- the loaders -------------------------------------------------------------------

    def device_batch_size(self) -> int:
        """Items per training DataLoader batch on one device."""
        raise NotImplementedError

    @property
    def eval_batch_size(self) -> int:
        return self._eval_batch_size or self.device_batch_size()

    def loader_options(self) -> dict[str, Any]:
        """This corpus's further DataLoader arguments."""
        return {}

    def _dataset(self, split: str) -> Dataset[Any]:
        return self.datasets[split]

    def _loader(self, split: str, batch_size: int, sampler: Sampler[int] | None) -> DataLoader:
        # training: the resumable order (a partial batch dropped); evaluation: in order, each item on one rank
        return DataLoader(
            self._dataset(split),
            batch_size=batch_size if self.batched else None,
            sampler=sampler,
            drop_last=self.batched and isinstance(sampler, ResumableSampler),
            num_workers=self.num_workers,
            **self.loader_options(),
        )

    def train_dataloader(self) -> DataLoader:
        size = self.device_batch_size()
        return self._loader("train", size, self.training_sampler(self._dataset("train"), size))

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.eval_batch_size, self.evaluation_sampler(self._dataset("val"), "val"))

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self.eval_batch_size, self.evaluation_sampler(self._dataset("test"), "test"))

    # --- the training order --------------------------------------------------------------

    def training_sampler(self, dataset: Dataset[Any], batch_size: int) -> ResumableSampler:
        """The training order over this run's ranks, at the checkpoint's position when resuming."""
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        sampler = ResumableSampler(dataset, batch_size, num_replicas=world, rank=rank, seed=self.seed)
        if self._resume_state:
            state, self._resume_state = self._resume_state, None
            sampler.seed = state["seed"]
            self.resume_sampler(sampler, state)
        self._train_sampler = sampler
        return sampler

    def evaluation_sampler(self, dataset: Dataset[Any], split: str) -> Sampler[int] | None:
        """The evaluation order: in one process none (in order); over several ranks each item on
        exactly one rank (``UnrepeatedDistributedSampler``; Lightning's own repeats items to pad
        the ranks, which would count twice), so the synchronised token-weighted metrics are the
        single process's. A rank may run one batch fewer: nothing in an evaluation step waits for
        the others, once every rank has an item (checked here)."""
        from lightning.pytorch.overrides.distributed import UnrepeatedDistributedSampler

        trainer = self.trainer
        world = trainer.world_size if trainer is not None else 1
        if world <= 1:
            return None
        assert trainer is not None
        items = len(cast(Sized, dataset))
        if items < world:
            raise SplitTooSmallForRanks(
                f"the {split} split has {items} evaluation item(s), fewer than the {world} ranks (each rank must "
                "evaluate one at least): use a larger split (or shorter data.eval_seq_len), or fewer devices"
            )
        return UnrepeatedDistributedSampler(dataset, num_replicas=world, rank=trainer.global_rank, shuffle=False)

    def resume_sampler(self, sampler: ResumableSampler, state: dict[str, int]) -> None:
        """Move a fresh sampler to the position :meth:`position` saved."""
        raise NotImplementedError

    def position(self, sampler: ResumableSampler, steps_done: int) -> dict[str, int]:
        """The position to save, ``steps_done`` training batches into the current epoch."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The position in the training order, saved in every checkpoint: seed, epoch and how far
        (Lightning's count of finished training steps, not what the prefetching DataLoader fetched),
        with each split's :meth:`content_fingerprint`."""
        sampler, trainer = self._train_sampler, self.trainer
        if sampler is None or trainer is None:
            return {}
        # Lightning's progress counter (a _ProcessedTracker at run time; declared as its base class)
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed  # type: ignore[attr-defined]
        position = self.position(sampler, int(done))
        content = self.content_fingerprint()  # the text the run trains on (a resume checks it)
        return {"seed": sampler.seed, "epoch": sampler.epoch, "order": ORDER_VERSION, **position, "content": content}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Remember the position; the next training loader starts there. A checkpoint of another data
        order (:data:`ablate.seeds.ORDER_VERSION`; none recorded: version 1) is refused."""
        state = dict(state_dict)
        if state and state.get("order", 1) != ORDER_VERSION:
            raise DataOrderMismatch(
                f"this checkpoint was trained in data order version {state.get('order', 1)} (epoch e shuffled "
                f"with seed + e, before each (seed, epoch) drew its own independent order); this version "
                f"trains in order version {ORDER_VERSION}, so resuming would change the order mid-run. Finish "
                "it with the ablate version that started it, or train it afresh in a new run directory"
            )
        self._resume_state = state or None
