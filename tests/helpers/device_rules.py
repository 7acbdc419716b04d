"""NCCL's device rule on a CPU-only machine, for the DDP tests (a callback: ``+callbacks.nccl._target_=helpers.device_rules.NcclDeviceRule``).

NCCL reduces tensors on the GPU only: a tensor made on the host and handed to a collective stops a
multi-GPU run with ``No backend type associated with device type cpu``. gloo, which every CPU test
runs, takes both, and on a CPU-only machine the host *is* the training device, so a test cannot see
the fault by a tensor's ``device``. What this module tracks instead is where a tensor would be on
a GPU machine, by where it came from:

* on the host: a tensor a factory function made without a device (``torch.tensor(x)``,
  ``torch.zeros(...)``, ``torch.from_numpy``), or on a device named as a string ``"cpu"``;
  ``t.cpu()``; ``t.to(d)`` where ``d`` is a host tensor's ``device`` (that object is marked: ``.to``
  of a host tensor's device stays on the host, as Lightning's metric states do when moved to a host
  value's device);
* on the device: a tensor made with ``device=`` any other device object (the module's
  ``self.device``, the strategy's ``root_device``), moved there with ``.to``, or computed from
  at least one tensor not on the host (a GPU op's result is on the GPU; a host scalar mixed in is
  promoted). An in-place op keeps its tensor where it was. Tensors made where this mode cannot
  see (autograd's gradients, DDP's C++ buckets, anything built before the callback's ``setup``)
  count as device tensors: the rule refuses only what it knows was made on the host.

While the Trainer runs (from the callback's ``setup`` to its ``teardown``) the public collectives of
``torch.distributed`` refuse a host tensor with NCCL's message and the call that made it. The
collectives torch itself calls inside ``*_object`` functions are not wrapped: those pick their
device from the backend.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import Callback
from torch.overrides import TorchFunctionMode

HOST_ATTR = "_made_on_host"
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce",
    "broadcast",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
)
_DEVICE_GETTER = torch.Tensor.device.__get__
_FACTORY_LIKE = {"zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like"}


class HostDeviceNames:
    """The ``device`` objects read from host tensors (``torch.device`` takes no attributes, so they
    are kept by identity; a run's few thousand are small)."""

    def __init__(self) -> None:
        self.objects: list[torch.device] = []
        self.ids: set[int] = set()

    def add(self, device: torch.device) -> torch.device:
        self.objects.append(device)
        self.ids.add(id(device))
        return device

    def __contains__(self, device: object) -> bool:
        return id(device) in self.ids


def is_host(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and bool(getattr(tensor, HOST_ATTR, False))


def _tensors(items: Iterable[Any]) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    for item in items:
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, (list, tuple)):
            found.extend(t for t in item if isinstance(t, torch.Tensor))
    return found


def _mark(out: Any, host: bool, where: str | None) -> None:
    for tensor in [out] if isinstance(out, torch.Tensor) else _tensors(out if isinstance(out, (list, tuple)) else []):
        try:
            setattr(tensor, HOST_ATTR, host)
            if host and where is not None:
                tensor._made_at = where  # type: ignore[attr-defined]
        except (AttributeError, RuntimeError):
            pass


class HostTensorTracker(TorchFunctionMode):
    """Marks every tensor made while it is active as made on the host or on the device (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.host_devices = HostDeviceNames()

    def _names_host(self, device: Any) -> bool:
        if device is None:
            return True  # the default device: the host
        if isinstance(device, str):
            return device.split(":")[0] == "cpu"
        return device in self.host_devices

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple = (), kwargs: dict | None = None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func == _DEVICE_GETTER:  # a new method-wrapper each time: compared, not identical
            return self.host_devices.add(out) if is_host(args[0]) else out
        if not isinstance(out, (torch.Tensor, list, tuple)):
            return out
        name = getattr(func, "__name__", "")
        inputs = _tensors([*args, *kwargs.values()])
        if name.endswith("_") and not name.startswith("__") and inputs:  # in place: stays where it is
            return out
        if name.startswith("__i") and inputs:  # __iadd__ & co.
            return out
        if name == "cpu":
            host = True
        elif name == "to" or "device" in kwargs:
            target = kwargs.get("device", next((a for a in args[1:] if not isinstance(a, torch.dtype)), None))
            if isinstance(target, torch.Tensor):
                host = is_host(target)
            elif target is None and "device" not in kwargs:
                host = is_host(args[0]) if inputs else True  # .to(dtype): stays where it is
            else:
                host = self._names_host(target)
        elif name in _FACTORY_LIKE or name.startswith("new_"):
            host = is_host(inputs[0])
        elif not inputs or name == "from_numpy":
            host = True  # a factory without a device: the default device, the host
        else:
            host = all(is_host(t) for t in inputs)
        if isinstance(out, torch.Tensor) and inputs and out is inputs[0] and is_host(out) != host:
            # .to(d) / .cpu() of a tensor already there return it itself; on a GPU machine they would
            # return a copy on the other device: an alias carries the new mark, the tensor keeps its own
            out = out.view_as(out)
        where = None
        if host:  # where the value was first made on the host: inherited through clones and arithmetic
            where = next((t._made_at for t in inputs if is_host(t) and hasattr(t, "_made_at")), None)
            where = where or "".join(traceback.format_stack(limit=8)[:-1])
        _mark(out, host, where)
        return out


class HostTensorRefused(RuntimeError):
    pass


def _refusing(name: str, collective: Callable[..., Any]) -> Callable[..., Any]:
    def checked(*args: Any, **kwargs: Any) -> Any:
        for tensor in _tensors([*args, *kwargs.values()]):
            if is_host(tensor):
                made = getattr(tensor, "_made_at", "(not recorded)")
                raise HostTensorRefused(
                    f"No backend type associated with device type cpu: torch.distributed.{name} was handed a tensor "
                    f"made on the host (NCCL reduces device tensors only). It was made at:\n{made}"
                )
        return collective(*args, **kwargs)

    checked.__wrapped__ = collective  # type: ignore[attr-defined]
    return checked


class NcclDeviceRule(Callback):
    """Enforces NCCL's rule on a gloo run (see the module docstring), from ``setup`` to ``teardown``."""

    def __init__(self) -> None:
        self.mode: HostTensorTracker | None = None
        self.saved: dict[str, Callable[..., Any]] = {}

    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.mode is not None:
            return
        for name in COLLECTIVES:
            if hasattr(dist, name):
                self.saved[name] = getattr(dist, name)
                setattr(dist, name, _refusing(name, self.saved[name]))
        self.mode = HostTensorTracker()
        self.mode.__enter__()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if self.mode is None:
            return
        self.mode.__exit__(None, None, None)
        self.mode = None
        for name, collective in self.saved.items():
            setattr(dist, name, collective)
        self.saved = {}
