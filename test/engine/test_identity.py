"""The NVIDIA driver release and kernel settings a profile records."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from alpamayo_offload.engine.config import EngineConfig
from alpamayo_offload.engine.identity import driver_version, kernel_settings

PROC = {
    'proprietary': 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  9 '
                   '2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n',
    'open': 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  '
            '(dvs-builder@U16-I3-B03-4-3)  Sun Jul 27 07:09:48 UTC 2025\n',
}


def _write(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def test_module_version_file_first(tmp_path: Path) -> None:
    _write(tmp_path, 'sys/module/nvidia/version', '580.159.04\n')
    _write(tmp_path, 'proc/driver/nvidia/version', PROC['open'])
    assert driver_version(tmp_path) == '580.159.04'


@pytest.mark.parametrize(('kind', 'want'), [('proprietary', '580.159.04'), ('open', '580.65.06')])
def test_proc_banner_of_either_module(tmp_path: Path, kind: str, want: str) -> None:
    _write(tmp_path, 'proc/driver/nvidia/version', PROC[kind])
    assert driver_version(tmp_path) == want


def test_no_nvidia_driver_is_empty(tmp_path: Path) -> None:
    assert driver_version(tmp_path) == ''
    _write(tmp_path, 'proc/driver/nvidia/version', 'something else\n')
    assert driver_version(tmp_path) == ''


def test_unreadable_files_give_empty(tmp_path: Path) -> None:
    (tmp_path / 'sys/module/nvidia').mkdir(parents=True)
    (tmp_path / 'sys/module/nvidia/version').write_bytes(b'\xff\xfe')
    assert driver_version(tmp_path) == ''


def test_kernel_settings_name_deterministic_mode_cublas_workspace_norms_and_graphs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.are_deterministic_algorithms_enabled()
    monkeypatch.delenv('CUBLAS_WORKSPACE_CONFIG', raising=False)
    try:
        torch.use_deterministic_algorithms(False)
        assert kernel_settings(fused_norms=True, stream_graphs=False) == (
            'deterministic=False, CUBLAS_WORKSPACE_CONFIG=default, norms=fused, graphs=resident')
        monkeypatch.setenv('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
        torch.use_deterministic_algorithms(True)
        assert kernel_settings(fused_norms=False, layer_graphs=False) == (
            'deterministic=True, CUBLAS_WORKSPACE_CONFIG=:4096:8, norms=per-op, graphs=off')
        assert kernel_settings(fused_norms=True).endswith(    # EngineConfig's default
            'graphs=resident+streamed')
        assert EngineConfig().stream_graphs and EngineConfig().layer_graphs
        assert kernel_settings(fused_norms=True, layer_graphs=False,
                               stream_graphs=True).endswith('graphs=off')
    finally:
        torch.use_deterministic_algorithms(before)
