"""Attach and remove the Hugging Face offloading peers on an already built module tree.

Accelerate (`device_map="auto"` + `max_memory`, and `cpu_offload`) and diffusers group
offloading (block- and leaf-level, with a side stream) each wrap the model in place; `remove`
takes every hook off again. The caller then restores the weights from its `HomeCopy`.
Neither library is a dependency of the project: `available()` says whether a row can run.
"""
from __future__ import annotations

import importlib.util
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

LOG = logging.getLogger(__name__)
_HOST_LIMIT = 1 << 40     # max_memory['cpu']: the host never limits placement here


class PeerError(RuntimeError):
    """A peer cannot be applied as configured; the message says what and why."""


@dataclass
class Attached:
    """A peer wrapped around the model: how long set-up took, what it placed, how to undo it."""

    runtime: str
    setup_s: float
    detail: dict[str, Any] = field(default_factory=dict)
    remove: Callable[[], None] = lambda: None


def available(package: str) -> bool:
    """Whether `package` (accelerate, diffusers) can be imported here."""
    return importlib.util.find_spec(package) is not None


def module_bytes(module: nn.Module) -> int:
    """Bytes of a module's parameters and buffers."""
    return sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])


def _device_index(device: torch.device) -> int | str:
    if device.type != 'cuda':
        return device.type
    return device.index if device.index is not None else torch.cuda.current_device()


def _placement(device_map: dict[str, Any], name: str) -> Any:
    """Where `device_map` puts module `name` (its own entry or its nearest mapped ancestor)."""
    parts = name.split('.')
    for end in range(len(parts), -1, -1):
        key = '.'.join(parts[:end])
        if key in device_map:
            return device_map[key]
    raise PeerError(f'device map has no entry covering {name!r}')


# ------------------------------------------------------------------------------ accelerate
def attach_device_map(model: nn.Module, device: torch.device, max_memory_bytes: int,
                      no_split: Sequence[str], keep_on_device: Sequence[str] = (),
                      skip_keys: str | Sequence[str] | None = None) -> Attached:
    """Accelerate `infer_auto_device_map` + `dispatch_model`, as `device_map="auto"` does.

    `keep_on_device` names modules that must be on the GPU (e.g. a token table that the model
    indexes on its own device); the greedy map already puts them there at every cap we run, and
    this raises rather than silently changing the peer's placement if it does not.
    """
    from accelerate import dispatch_model, infer_auto_device_map

    start = time.perf_counter()
    gpu = _device_index(device)
    device_map = infer_auto_device_map(model, max_memory={gpu: max_memory_bytes,
                                                          'cpu': _HOST_LIMIT},
                                       no_split_module_classes=list(no_split))
    for name in keep_on_device:
        if _placement(device_map, name) != gpu:
            raise PeerError(f'device_map="auto" with max_memory {max_memory_bytes} B puts {name} '
                            'on the host; the model gathers token rows on the table\'s device, '
                            "which accelerate sets to 'meta': give more max_memory")
    dispatch_model(model, device_map, main_device=gpu if device.type == 'cuda' else None,
                   skip_keys=skip_keys)
    if device.type == 'cuda':
        torch.cuda.synchronize()
    named = dict(model.named_modules())
    on_gpu = [k for k, v in device_map.items() if v == gpu]
    detail = {
        'max_memory_bytes': max_memory_bytes,
        'gpu_bytes': sum(module_bytes(named[k]) if k else module_bytes(model) for k in on_gpu),
        'host_bytes': sum(module_bytes(named[k]) for k, v in device_map.items() if v == 'cpu'),
        'gpu_modules': on_gpu,
    }

    def remove() -> None:
        from accelerate.hooks import remove_hook_from_module
        remove_hook_from_module(model, recurse=True)

    return Attached('accelerate-device-map', time.perf_counter() - start, detail, remove)


def attach_cpu_offload(model: nn.Module, device: torch.device,
                       keep_on_device: Sequence[nn.Module] = ()) -> Attached:
    """Accelerate `cpu_offload`: every leaf streams from pageable host memory on each call.

    Modules in `keep_on_device` get their hook removed and move to the GPU (a token table the
    model indexes on its own device would otherwise be on `meta`).
    """
    from accelerate import cpu_offload
    from accelerate.hooks import remove_hook_from_module

    start = time.perf_counter()
    cpu_offload(model, execution_device=device)
    for module in keep_on_device:
        remove_hook_from_module(module, recurse=True)
        module.to(device)
    detail = {'kept_on_device_bytes': sum(module_bytes(m) for m in keep_on_device)}

    def remove() -> None:
        remove_hook_from_module(model, recurse=True)

    return Attached('accelerate-cpu-offload', time.perf_counter() - start, detail, remove)


# ------------------------------------------------------------------------------- diffusers
def _drop_from_groups(roots: Sequence[nn.Module], module: nn.Module) -> None:
    """Take `module` out of every diffusers group under `roots` and remove its own hooks."""
    ids = {id(t) for t in [*module.parameters(), *module.buffers()]}
    for root in roots:
        for sub in root.modules():
            registry = getattr(sub, '_diffusers_hook', None)
            if registry is None:
                continue
            for hook in registry.hooks.values():
                group = getattr(hook, 'group', None)
                if group is None:
                    continue
                group.modules = [m for m in group.modules if m is not module]
                group.parameters = [p for p in group.parameters if id(p) not in ids]
                group.buffers = [b for b in group.buffers if id(b) not in ids]
                for key in [k for k in group.cpu_param_dict if id(k) in ids]:
                    del group.cpu_param_dict[key]
    for sub in module.modules():
        _remove_registry(sub)


def _remove_registry(module: nn.Module) -> None:
    registry = getattr(module, '_diffusers_hook', None)
    if registry is None:
        return
    for name in reversed(list(registry.hooks)):
        registry.remove_hook(name, recurse=False)
    del module._diffusers_hook
    module.__dict__.pop('forward', None)   # remove_hook leaves the bound method as an attribute


def attach_group_offloading(model: nn.Module, device: torch.device, roots: Sequence[nn.Module],
                            offload_type: str, keep_on_device: Sequence[nn.Module] = (),
                            pull_out: Sequence[nn.Module] = (), use_stream: bool = True,
                            record_stream: bool = True) -> Attached:
    """diffusers `apply_group_offloading` on each root that the model calls itself.

    Roots must be modules whose own forward runs (the stream prefetch order is traced from it);
    `pull_out` modules leave their group and live on the GPU (the reference note's fair variant:
    the token table would otherwise be copied synchronously on every pass); `keep_on_device`
    are the modules outside every root.
    """
    from diffusers.hooks import apply_group_offloading

    start = time.perf_counter()
    stream = use_stream and device.type == 'cuda'
    for root in roots:
        apply_group_offloading(
            root, onload_device=device, offload_device=torch.device('cpu'),
            offload_type=offload_type,
            num_blocks_per_group=1 if offload_type == 'block_level' else None,
            use_stream=stream, record_stream=record_stream and stream)
    for module in pull_out:
        _drop_from_groups(roots, module)
        module.to(device)
    for module in keep_on_device:
        module.to(device)
    if device.type == 'cuda':
        torch.cuda.synchronize()
    detail = {'offload_type': offload_type, 'use_stream': stream,
              'record_stream': record_stream and stream,
              'on_device_bytes': sum(module_bytes(m) for m in [*keep_on_device, *pull_out])}

    def remove() -> None:
        for root in roots:
            for sub in root.modules():
                _remove_registry(sub)

    return Attached(f'diffusers-{offload_type.split("_")[0]}', time.perf_counter() - start,
                    detail, remove)

