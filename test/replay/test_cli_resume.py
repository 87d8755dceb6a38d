"""`replay` CLI: the default parameter file, and the `--resume` check before the engine loads."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from alpamayo_offload import cli
from alpamayo_offload.app import engine_loader
from alpamayo_offload.replay import commands
from alpamayo_offload.replay.sample_store import SampleStore
from alpamayo_offload.replay.session import fingerprint


class EngineReachedError(Exception):
    """Raised by the stand-in loader: the command got as far as loading the engine."""


def _topic_args(drive) -> list[str]:
    return [*(f'--camera={s}={drive.topic_for(s)}' for s in drive.camera_slots),
            '--odometry', drive.odom_topic]


def _store_of_another_run(bag: Path, drive, out: Path) -> None:
    """`out` holds the start of a run at 1 Hz (its header), as an interrupted run leaves it."""
    args = cli.build_parser().parse_args(['replay', str(bag), *_topic_args(drive), '--rate', '1',
                                          '--out', str(out)])
    cfg, bags = commands.configure(args)
    SampleStore.open(out, fingerprint(cfg, bags), resume=False).close()


@pytest.fixture
def loader_calls(monkeypatch) -> list[object]:
    calls: list[object] = []

    def loader(*args, **kw):
        calls.append(args)
        raise EngineReachedError
    monkeypatch.setattr(engine_loader, 'load_engine', loader)
    return calls


def test_mismatching_resume_fails_before_the_engine_loads(bag_factory, tmp_path: Path,
                                                          monkeypatch, loader_calls,
                                                          caplog) -> None:
    bag, drive = bag_factory()
    out = tmp_path / 'out'
    _store_of_another_run(bag, drive, out)
    monkeypatch.chdir(tmp_path)        # no config/ here: the default file is found regardless
    with caplog.at_level(logging.ERROR):
        code = cli.main(['replay', str(bag), *_topic_args(drive), '--rate', '2', '--out',
                         str(out), '--resume', '--no-progress'])
    assert code == 2
    assert loader_calls == []
    assert 'different configuration or bags (differs in: config)' in caplog.text


def test_matching_resume_goes_on_to_load_the_engine(bag_factory, tmp_path: Path, monkeypatch,
                                                    loader_calls) -> None:
    bag, drive = bag_factory()
    out = tmp_path / 'out'
    _store_of_another_run(bag, drive, out)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EngineReachedError):
        cli.main(['replay', str(bag), *_topic_args(drive), '--rate', '1', '--out', str(out),
                  '--resume', '--no-progress'])
    assert len(loader_calls) == 1


def test_results_without_resume_fail_before_the_engine_loads(bag_factory, tmp_path: Path,
                                                             loader_calls, caplog) -> None:
    bag, drive = bag_factory()
    out = tmp_path / 'out'
    _store_of_another_run(bag, drive, out)
    with caplog.at_level(logging.ERROR):
        code = cli.main(['replay', str(bag), *_topic_args(drive), '--rate', '1', '--out',
                         str(out), '--no-progress'])
    assert code == 2 and loader_calls == []
    assert 'already holds replay results; pass --resume' in caplog.text


@pytest.mark.parametrize('workers', ['0', '-2', 'two'])
def test_ray_worker_count_must_be_a_positive_integer(workers: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(['replay', 'bag', '--ray', 'local', '--workers', workers])
    assert exit_info.value.code == 2
    assert '--workers' in capsys.readouterr().err
