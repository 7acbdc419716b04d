"""Will a training step fit in memory? Estimated before any data is read, so that an oversized batch
is refused with the numbers and the largest micro-batch that fits, not killed without a word.

The estimate (bytes), for ``P`` parameters, micro-batch ``b``, sequence length ``s``, width ``h``,
FFN width ``f``, ``a`` heads, ``L`` layers, vocabulary ``V``, ``e`` bytes per activation element:

- weights ``4P`` + gradients ``4P`` (fp32) + optimiser state (Adam(W) ``8P``, SGD ``4P``);
- activations per layer (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models", Sec. 4.1, eq. 1, for 16-bit elements: ``s b h (34 + 5 a s / h)``),
  generalised to an FFN of width ``f`` and ``e`` bytes: ``e/2 * s b (18 h + 4 f)``, plus
  ``e/2 * 5 a s^2 b`` when attention matrices are materialised (``attn=math``; fused SDPA keeps none);
- the output layer: logits, their log-softmax and its gradient, ``3 e s b V``;
- a margin of 25% for the allocator, temporary buffers and the framework.

A planning number, against the memory available (free GPU memory, or :func:`host_limits`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.errors import ConfigError

if TYPE_CHECKING:
    from ablate.nn.spec import ModelSpec

MARGIN = 1.25
OPTIMIZER_STATE_FLOATS = {"adamw": 2, "adam": 2, "sgd": 1}


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes of one training step, by part."""

    weights_and_grads: float
    optimizer: float
    activations_per_sequence: float
    micro_batch: int

    @property
    def fixed(self) -> float:
        return self.weights_and_grads + self.optimizer

    @property
    def total(self) -> float:
        return MARGIN * (self.fixed + self.activations_per_sequence * self.micro_batch)

    def largest_micro_batch(self, available: float) -> int:
        """The largest micro-batch whose estimate fits in ``available`` bytes (0: none does)."""
        return max(0, int((available / MARGIN - self.fixed) // self.activations_per_sequence))


def bytes_per_element(precision: Any) -> int:
    """Activation element size for Lightning's ``trainer.precision`` (``32-true``, ``bf16-mixed``, ...)."""
    text = str(precision)
    return 2 if text.startswith(("16", "bf16")) else 8 if text.startswith("64") else 4


def estimate(
    n_params: int,
    n_layers: int,
    d_model: int,
    d_ff: int,
    n_heads: int,
    seq_len: int,
    vocab_size: int,
    micro_batch: int,
    optimizer: str = "adamw",
    precision: Any = "32-true",
    materialised_attention: bool = False,
) -> MemoryEstimate:
    """The training-step estimate of the module docstring."""
    e = bytes_per_element(precision)
    per_layer = e / 2 * seq_len * (18 * d_model + 4 * d_ff)
    if materialised_attention:
        per_layer += e / 2 * 5 * n_heads * seq_len**2
    per_sequence = n_layers * per_layer + 3 * e * seq_len * vocab_size
    return MemoryEstimate(
        weights_and_grads=8.0 * n_params,
        optimizer=4.0 * OPTIMIZER_STATE_FLOATS.get(optimizer, 2) * n_params,
        activations_per_sequence=per_sequence,
        micro_batch=micro_batch,
    )


def available_bytes(accelerator: str) -> tuple[float, str] | None:
    """Memory a training step may use, and where: free memory of the first CUDA device, else the
    tightest of :func:`host_limits`; None when nothing can be read, or for a GPU run without a GPU."""
    if accelerator in ("gpu", "cuda", "auto"):
        import torch

        if torch.cuda.is_available():
            free, _ = torch.cuda.mem_get_info()
            return float(free), "free GPU memory"
        if accelerator != "auto":
            return None  # a GPU run checked on a machine without one (a login node): nothing to compare with
    limits = host_limits()
    return min(limits) if limits else None


UNLIMITED = 2**60  # cgroup v1 writes "no limit" as a number near 2**63


def host_limits() -> list[tuple[float, str]]:
    """``(bytes this process may still use, what limits it)`` for each limit that applies here:
    /proc/meminfo alone passed jobs that ``prlimit --as``, a cgroup or SLURM then killed."""
    readers = (meminfo_available, address_space_room, cgroup_room, slurm_room)
    return [found for reader in readers if (found := reader()) is not None]


def meminfo_available() -> tuple[float, str] | None:
    """The RAM the kernel reports available (``MemAvailable`` of ``/proc/meminfo``)."""
    available = _proc_bytes("/proc/meminfo", "MemAvailable")
    if available is not None:
        return available, "available RAM"
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")), "available RAM"
    except (ValueError, OSError, AttributeError):
        return None


def _proc_bytes(path: str, field: str) -> float | None:
    """A field in kB of a ``/proc`` file (``/proc/meminfo``, ``/proc/self/status``), in bytes."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def address_space_room() -> tuple[float, str] | None:
    """Room left under the address-space limit (``ulimit -v``, ``prlimit --as``: ``RLIMIT_AS``)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft in (resource.RLIM_INFINITY, -1) or soft >= UNLIMITED:
        return None
    used = _proc_bytes("/proc/self/status", "VmSize") or 0.0
    return max(0.0, soft - used), f"room under the process's address-space limit of {gib(soft)} (ulimit -v)"


def _read_number(path: Path) -> float | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return None if value >= UNLIMITED else value


def cgroup_room(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> tuple[float, str] | None:
    """Room left under the tightest memory limit of this process's cgroup and its parents (v1 or v2)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    found: list[tuple[float, str]] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # v2, unified
            base, limit_name, usage_name = (
                root / "unified" if (root / "unified").is_dir() else root,
                "memory.max",
                "memory.current",
            )
        elif "memory" in controllers.split(","):  # v1
            base, limit_name, usage_name = root / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        folder = base / path.lstrip("/")
        while True:
            limit = _read_number(folder / limit_name)
            if limit is not None:
                usage = _read_number(folder / usage_name) or 0.0
                found.append(
                    (
                        max(0.0, limit - usage),
                        f"room under the cgroup memory limit of {gib(limit)} ({folder / limit_name})",
                    )
                )
            if folder == base or folder == folder.parent:
                break
            folder = folder.parent
    return min(found) if found else None


def slurm_room(environ: Mapping[str, str] | None = None) -> tuple[float, str] | None:
    """The SLURM allocation's memory (``--mem`` or ``--mem-per-cpu``) less this process's resident set."""
    env = os.environ if environ is None else environ
    try:
        if env.get("SLURM_MEM_PER_NODE"):
            limit, what = float(env["SLURM_MEM_PER_NODE"]) * 2**20, "--mem"
        elif env.get("SLURM_MEM_PER_CPU"):
            cpus = env.get("SLURM_CPUS_ON_NODE") or env.get("SLURM_CPUS_PER_TASK") or "1"
            limit, what = (
                float(env["SLURM_MEM_PER_CPU"]) * 2**20 * int(cpus.split("(")[0].split(",")[0]),
                "--mem-per-cpu",
            )
        else:
            return None
    except ValueError:
        return None
    used = _proc_bytes("/proc/self/status", "VmRSS") or 0.0
    return max(0.0, limit - used), f"room in the SLURM job's memory of {gib(limit)} ({what})"


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_fits(est: MemoryEstimate, available: tuple[float, str] | None, batch_key: str, per_unit: int = 1) -> None:
    """Refuse a step whose estimate exceeds the memory available, with the numbers and the fix."""
    if available is None or est.total <= available[0]:
        return
    room, where = available
    fits = est.largest_micro_batch(room) * per_unit
    keeps = " (gradient accumulation keeps the global batch data.batch_size)" if per_unit == 1 else ""
    fix = f"set {batch_key} to at most {fits}{keeps}" if fits else "use a smaller model or a shorter sequence"
    raise ConfigError(
        f"a training step needs about {gib(est.total)} (weights and gradients {gib(est.weights_and_grads)}, optimiser "
        f"state {gib(est.optimizer)}, activations {gib(est.activations_per_sequence * est.micro_batch)} for a "
        f"micro-batch of {est.micro_batch}, +25% margin), more than the {gib(room)} of {where}: {fix}"
    )


def check_training_step(
    data: Mapping[str, Any], optimizer: str, trainer: Mapping[str, Any], spec: ModelSpec, micro_batch: int
) -> None:
    """Refuse a training step of this config that cannot fit in memory (``micro_batch``: the
    per-device batch; the vocabulary: the configured one, at most 256 characters for ``char``)."""
    vocab = int(data.get("vocab_size") or 256) if data.get("tokenizer", "bpe") != "char" else 256
    layers = spec.n_layers + spec.encoder_layers
    n_params = layers * (4 * spec.d_model**2 + 3 * spec.d_model * spec.d_ff) + 2 * vocab * spec.d_model
    if data.get("max_tokens"):  # token batches (seq2seq tasks): sentences of about model.max_len or 128 tokens
        seq_len = int(spec.max_len or 128)
        micro, batch_key, per_unit = max(1, int(data["max_tokens"]) // seq_len), "data.max_tokens", seq_len
    else:
        micro, seq_len, batch_key, per_unit = micro_batch, int(data["seq_len"]), "data.micro_batch_size", 1
    est = estimate(
        n_params,
        layers,
        spec.d_model,
        spec.d_ff,
        spec.n_heads,
        seq_len,
        vocab,
        micro,
        optimizer=optimizer,
        precision=trainer.get("precision"),
        materialised_attention=spec.choice("attn") == "math",
    )
    check_fits(est, available_bytes(str(trainer.get("accelerator", "cpu"))), batch_key, per_unit)
