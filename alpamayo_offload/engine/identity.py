"""What model, driver and kernel settings an engine runs, as `Engine.info` reports them."""
from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from ..model import AlpamayoR1
from .config import EngineConfig


def _model_identity(config: EngineConfig, model: AlpamayoR1) -> str:
    n = sum(p.numel() for p in model.parameters())
    kind = 'checkpoint' if Path(config.model).is_dir() else f'preset seed={config.seed}'
    return f'{model.cfg.model_type} {config.model} ({kind}, {n} parameters)'


def driver_version(root: Path = Path('/')) -> str:
    """Return the NVIDIA kernel driver's release (e.g. '580.159.04'); '' where there is none.

    torch reports only the CUDA driver API level, which many releases share; the kernel module
    names the release a profile was measured with (Linux; Jetson's nvgpu has neither file).
    """
    try:
        return (root / 'sys/module/nvidia/version').read_text(encoding='ascii').strip()
    except (OSError, UnicodeDecodeError):
        pass
    try:
        text = (root / 'proc/driver/nvidia/version').read_text(encoding='ascii')
    except (OSError, UnicodeDecodeError):
        return ''
    found = re.search(r'Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)', text)
    return found.group(1) if found else ''


def kernel_settings(*, fused_norms: bool, layer_graphs: bool = EngineConfig.layer_graphs,
                    stream_graphs: bool = EngineConfig.stream_graphs) -> str:
    """Return the settings that choose GPU kernels, as a profile records them.

    Deterministic algorithms and cuBLAS's workspace size (process-wide) decide which kernels run
    (strict mode costs a few per cent of latency), and fused norms and
    graphed layers launch fewer of them (`EngineConfig.fused_norms`, `layer_graphs`,
    `stream_graphs`), so a profile's timings only hold with the same settings.
    """
    workspace = os.environ.get('CUBLAS_WORKSPACE_CONFIG') or 'default'
    return (f'deterministic={torch.are_deterministic_algorithms_enabled()}, '
            f'CUBLAS_WORKSPACE_CONFIG={workspace}, norms={"fused" if fused_norms else "per-op"}, '
            f'graphs={_graphs_setting(layer_graphs, stream_graphs)}')


def _graphs_setting(layer_graphs: bool, stream_graphs: bool) -> str:
    if not layer_graphs:
        return 'off'
    return 'resident+streamed' if stream_graphs else 'resident'
