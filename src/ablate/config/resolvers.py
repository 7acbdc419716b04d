"""OmegaConf resolvers used by the configs. Registered on import of :mod:`ablate`."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import ListConfig, OmegaConf

from ablate.nn.axes import ARCHITECTURE_GROUPS

MAX_DIRNAME = 120


# Overrides that define a variant come first in a job's directory name, run-control ones last.
ARCHITECTURE_FIRST = ("experiment", "seed", "task", *ARCHITECTURE_GROUPS, "model", "data", "optim")
# What a folder name may hold: nothing Hydra's override grammar treats specially (``=``, ``,``,
# brackets, quotes, spaces, ``$``, ``~``), so that any path the project prints pastes into
# ``ckpt_path=`` unquoted. Key and value are joined by ``-``, the overrides by ``.``.
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
KV_SEP, ITEM_SEP = "-", "."


def name_order(override: str) -> tuple[int, str]:
    """The order of overrides in a job's name (folders and run names): :data:`ARCHITECTURE_FIRST`, the seed last."""
    key = override.lstrip("+~").split("=", 1)[0]
    if key == "seed":
        return len(ARCHITECTURE_FIRST) + 1, override
    top = key.split(".", 1)[0]
    return (ARCHITECTURE_FIRST.index(top) if top in ARCHITECTURE_FIRST else len(ARCHITECTURE_FIRST)), override


def name_part(override: str) -> str:
    """``norm=pre`` -> ``norm-pre``; ``+model.dropout=0.1`` -> ``model.dropout-0.1``; ``~key`` -> ``no-key``;
    other characters than letters, digits, ``._+-`` become ``_``."""
    if override.startswith("~"):
        return "no-" + _UNSAFE.sub("_", override.lstrip("~").split("=", 1)[0])
    key, sep, value = override.lstrip("+").partition("=")
    return _UNSAFE.sub("_", key) + (KV_SEP + _UNSAFE.sub("_", value) if sep else "")


def joined_name(parts: list[str], exact: list[str]) -> str:
    """``parts`` joined by ``.`` (``default`` when none); a lossy or too long name (the first parts kept)
    ends with a hash of the ``exact`` overrides, so two jobs never share a name."""
    name = ITEM_SEP.join(parts) or "default"
    lossy = any(_UNSAFE.search(part) for o in exact for part in o.lstrip("+~").split("=", 1))
    if len(name) <= MAX_DIRNAME and not lossy:
        return name
    digest = hashlib.sha1("\n".join(exact).encode()).hexdigest()[:8]
    seed = [p for p in parts if p.startswith(f"seed{KV_SEP}")]  # a long name still says its seed
    room = MAX_DIRNAME - len(digest) - 1 - sum(len(p) + 1 for p in seed)
    kept: list[str] = []
    for part in (p for p in parts if p not in seed):
        if sum(len(k) + 1 for k in kept) + len(part) > room:
            break
        kept.append(part)
    return f"{ITEM_SEP.join([*kept, *seed]) or 'job'}{KV_SEP}{digest}"


def job_name(overrides: Iterable[str]) -> str:
    """A sweep job's directory and run name from its overrides: readable (``norm-pre.pos-rope.seed-1``),
    stable across re-runs, short enough for a file system and safe to paste unquoted."""
    items = sorted((str(o) for o in overrides), key=name_order)
    return joined_name([name_part(o) for o in items], [o.lstrip("+") for o in items])


def split_override_dirname(override_dirname: str) -> list[str]:
    """Hydra's ``override_dirname`` (``norm=pre,optim.betas=[0.9,0.95]``, ``kv_sep: "="``, ``item_sep: ","``)
    back into its overrides: a comma starts a new one only where a key and ``=`` follow."""
    return re.split(r",(?=[+~]*[\w.@/-]+=)", override_dirname) if override_dirname else []


def job_dirname(override_dirname: str) -> str:
    """:func:`job_name` of Hydra's ``override_dirname`` (``hydra.sweep.subdir`` of a sweeper that does not
    name its jobs)."""
    return job_name(split_override_dirname(override_dirname))


MAX_SWEEP_PREFIX = 60
MAX_SWEEP_NAME = 90  # prefix and constants; the hash comes after
# always run control, never part of a sweep's identity (besides hydra.job...exclude_keys)
RUN_CONTROL_KEYS = ("sweep_name", "skip_completed", "resume_allow_changes", "tags")


def _canonical_override(override) -> str:  # hydra's Override
    """``key=value`` with a sweep's values sorted, so ``norm=post,pre`` == ``norm=pre,post``."""
    key = override.get_key_element()
    try:
        if override.is_sweep_override():
            return f"{key}={','.join(sorted(set(override.sweep_string_iterator())))}"
        return f"{key}={override.get_value_element_as_str()}"
    except HydraException:  # interval sweeps, deletions: as typed
        return override.input_line


def sweep_dirname(
    sweep_name: str | None, overrides: Iterable[str], exclude_keys: Iterable[str] = (), log_dir: str | None = None
) -> str:
    """The name of a sweep's directory, the same whenever the same command is run again.

    ``sweep_name`` wins when set. Otherwise ``<experiment or swept keys>-<constants>-<hash>``
    (``-m norm=pre,post pos=rope,learned model.n_layers=2`` gives ``norm+pos-n_layers-2-<hash>``); the
    hash covers the overrides in any order, run-control ones (``exclude_keys``, :data:`RUN_CONTROL_KEYS`)
    left out. A directory named by an earlier version under ``log_dir/multirun`` keeps its name.

    Hydra resolves ``hydra.sweep.dir`` once on the sweep's config and copies the resolver cache into
    every job's config: registered with ``use_cache=True``, each job sees that value, not its own.
    """
    if sweep_name:
        name = str(sweep_name)
        safe = _safe_dirname(name)
        if safe == name:
            return safe
        # sanitising changed it: two names that differ only in what was replaced (sweep_name=α vs β)
        # must not share a directory, so the exact name's hash is appended
        return f"{safe or 'sweep'}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    if isinstance(overrides, ListConfig):  # as typed: an override holding ${...} is not resolved
        overrides = cast(list[Any], OmegaConf.to_container(overrides, resolve=False))
    excluded = set(exclude_keys) | set(RUN_CONTROL_KEYS)
    parsed = [
        o
        for o in OverridesParser.create().parse_overrides([str(o) for o in overrides])
        if o.key_or_group not in excluded
    ]
    canonical = sorted(_canonical_override(o) for o in parsed)
    digest = hashlib.sha1("\n".join(canonical).encode()).hexdigest()[:8]
    experiments = [o for o in parsed if o.key_or_group == "experiment"]
    swept = sorted(o.key_or_group for o in parsed if o.is_sweep_override())
    constants = [o for o in parsed if not o.is_sweep_override() and o.key_or_group != "experiment"]
    if experiments:
        prefix = "+".join(_canonical_override(o).split("=", 1)[1] for o in experiments)
    else:
        prefix = "+".join(swept) or "default"
    prefix = _safe_dirname(prefix)[:MAX_SWEEP_PREFIX] or "sweep"
    label = _constants_label(constants)[: max(0, MAX_SWEEP_NAME - len(prefix))].rstrip("._-")
    name = f"{prefix}-{label}-{digest}" if label else f"{prefix}-{digest}"
    if log_dir:  # a sweep named before keeps its directory
        earlier = _earlier_names(prefix, experiments, swept, constants, digest)
        return next((n for n in earlier if (Path(log_dir) / "multirun" / n).is_dir()), name)
    return name


def _constants_label(constants: list[Any]) -> str:
    """``n_layers-2.max_steps-100``: the constant overrides as in job names, keys shortened where unique."""
    return ITEM_SEP.join(name_part(item) for item in _short_keys(constants, name_order))


def _short_keys(constants: list[Any], order: Callable[[str], Any]) -> list[str]:
    """The constant overrides as ``key=value`` in ``order``, each key by its last part where unique."""
    items = sorted((_canonical_override(o).lstrip("+") for o in constants), key=order)
    keys = [item.split("=", 1)[0] for item in items]
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return [item.replace(k, s, 1) if last.count(s) == 1 else item for item, k, s in zip(items, keys, last)]


def _safe_dirname(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("._")


def _earlier_names(
    prefix: str, experiments: list[Any], swept: list[str], constants: list[Any], digest: str
) -> list[str]:
    """The names an earlier version gave the same command's sweep: without its constants, and with
    ``=`` and ``,`` (``norm,pos-n_layers=2,max_steps=100-<hash>``)."""
    old_prefix = prefix if experiments else _legacy_safe(",".join(swept) or "default")[:MAX_SWEEP_PREFIX] or "sweep"
    label = _legacy_safe(",".join(_short_keys(constants, _legacy_priority)))[
        : max(0, MAX_SWEEP_NAME - len(old_prefix))
    ].rstrip(",._=")
    names = [f"{old_prefix}-{digest}", f"{prefix}-{digest}"]
    return names + ([f"{old_prefix}-{label}-{digest}"] if label else [])


def _legacy_priority(item: str) -> int:
    top = item.lstrip("+~").split("=", 1)[0].split(".", 1)[0]
    return ARCHITECTURE_FIRST.index(top) if top in ARCHITECTURE_FIRST else len(ARCHITECTURE_FIRST)


def _legacy_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._,=+-]+", "_", text.replace("/", "_")).strip("._")


def legacy_job_dirname(override_dirname: str) -> str:
    """A job directory's name as an earlier version gave it (``model.n_layers=2,norm=pre``), to resume it."""
    name = override_dirname.replace("/", "_") or "default"
    return hashed_if_long(name, sorted(name.split(","), key=_legacy_priority))


def hashed_if_long(name: str, items: Iterable[str]) -> str:
    """``name`` up to :data:`MAX_DIRNAME` characters; a longer one as the first ``items`` that fit,
    joined by ``,``, then ``..`` and a hash of the whole (the legacy job and run names)."""
    if len(name) <= MAX_DIRNAME:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    kept = ""
    for item in items:
        if len(kept) + len(item) + 1 > MAX_DIRNAME - 12:
            break
        kept = f"{kept},{item}" if kept else item
    return f"{kept}..{digest}"


def data_parallel_precision(accelerator: str) -> str:
    """``trainer.precision`` of ``conf/trainer/ddp.yaml``: ``32-true`` on the CPU (bf16 autocast is about
    3x slower without bf16 units), ``bf16-mixed`` on GPUs (``auto`` is a GPU)."""
    return "32-true" if str(accelerator).lower() == "cpu" else "bf16-mixed"


def register() -> None:
    from ablate.config import locations

    # conf/paths: the folders, by one rule that needs no Hydra runtime config (ablate.config.locations)
    if not OmegaConf.has_resolver("ablate_root"):
        OmegaConf.register_new_resolver("ablate_root", lambda: str(locations.project_root()))
    # each takes the root (paths.root_dir), so that overriding the root moves the folders under it
    for name, where in (
        ("ablate_data_dir", locations.data_dir),
        ("ablate_cache_dir", locations.cache_dir),
        ("ablate_log_dir", locations.log_dir),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, lambda root=None, where=where: str(where(root)))
    if not OmegaConf.has_resolver("ablate_ddp_precision"):
        OmegaConf.register_new_resolver("ablate_ddp_precision", data_parallel_precision)
    if not OmegaConf.has_resolver("job_dirname"):
        OmegaConf.register_new_resolver("job_dirname", job_dirname)
    if not OmegaConf.has_resolver("sweep_dirname"):
        # cached: computed once on the sweep's config, then the same for every job (see above)
        OmegaConf.register_new_resolver("sweep_dirname", sweep_dirname, use_cache=True)
