"""The node's parameter file: the installed package's, else the source tree's; never the CWD's."""
from __future__ import annotations

from pathlib import Path

import pytest

from alpamayo_offload.app.param_file import (
    PARAMS_FILE_NAME,
    SOURCE_CONFIG_DIR,
    ParameterFileError,
    default_params_file,
)


def _install(prefix: Path) -> Path:
    """A colcon-style install prefix: ament index marker plus the share directory's config."""
    (prefix / 'share' / 'ament_index' / 'resource_index' / 'packages').mkdir(parents=True)
    (prefix / 'share' / 'ament_index' / 'resource_index' / 'packages' / 'alpamayo_offload'
     ).touch()
    config = prefix / 'share' / 'alpamayo_offload' / 'config'
    config.mkdir(parents=True)
    (config / PARAMS_FILE_NAME).write_text('/**:\n  ros__parameters: {}\n')
    return config / PARAMS_FILE_NAME


def test_installed_package_file_comes_first(tmp_path: Path, monkeypatch) -> None:
    installed = _install(tmp_path / 'install')
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(tmp_path / 'install'))
    assert default_params_file() == installed


def test_without_an_install_the_source_tree_file_whatever_the_cwd(tmp_path: Path,
                                                                  monkeypatch) -> None:
    monkeypatch.delenv('AMENT_PREFIX_PATH', raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'config').mkdir()
    (tmp_path / 'config' / PARAMS_FILE_NAME).write_text('not this one')
    found = default_params_file()
    assert found == SOURCE_CONFIG_DIR / PARAMS_FILE_NAME and found.is_absolute()
    assert found.is_file()


def test_an_install_without_this_package_falls_back_to_the_source_tree(tmp_path: Path,
                                                                        monkeypatch) -> None:
    (tmp_path / 'other' / 'share').mkdir(parents=True)
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(tmp_path / 'other'))
    assert default_params_file() == SOURCE_CONFIG_DIR / PARAMS_FILE_NAME


def test_neither_place_names_both(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv('AMENT_PREFIX_PATH', raising=False)
    empty = tmp_path / 'no_config'
    with pytest.raises(ParameterFileError) as err:
        default_params_file(source_dir=empty)
    text = str(err.value)
    assert f'share/alpamayo_offload/config/{PARAMS_FILE_NAME}' in text
    assert str(empty / PARAMS_FILE_NAME) in text and '--params' in text
