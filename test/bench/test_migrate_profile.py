"""`bench/migrate_profile.py`: schema 6 to 7 with compression "not measured", nothing else moved."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from alpamayo_offload.planning.errors import ProfileFormatError
from alpamayo_offload.planning.profile import SCHEMA_VERSION, load_profile, save_profile
from bench import migrate_profile
from testkit.paper import table3_profile

RUN12 = Path(__file__).resolve().parents[2] / 'docs' / 'results' / '2026-11-30-h200' / 'run12'


def _as_schema_6(data: dict) -> dict:
    sequences = [{k: v for k, v in s.items()
                  if k not in ('compressed_bytes', 'decompress_gbps', 'decompress_contention')}
                 for s in data['sequences']]
    return {**data, 'schema_version': 6, 'sequences': sequences}


def test_a_schema_6_file_becomes_the_same_profile_without_compression(tmp_path: Path) -> None:
    profile = table3_profile()
    path = tmp_path / 'p.json'
    save_profile(profile, path)
    path.write_text(json.dumps(_as_schema_6(json.loads(path.read_text()))))
    with pytest.raises(ProfileFormatError, match='bench.migrate_profile'):
        load_profile(path)
    assert migrate_profile.main([str(path)]) == 0
    migrated, _ = load_profile(path)
    assert json.loads(path.read_text())['schema_version'] == SCHEMA_VERSION
    assert migrated.sequences == profile.sequences and migrated.phases == profile.phases
    assert not migrated.compression_measured
    assert migrated.settings['compression'] == migrate_profile.NOT_MEASURED


def test_other_files_are_named_and_left_alone(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / 'p.json'
    save_profile(table3_profile(), path)
    before = path.read_text()
    assert migrate_profile.main([str(path)]) == 1
    assert path.read_text() == before and 'not a schema-6 profile' in capsys.readouterr().err


@pytest.mark.parametrize('part', ['planner_a_pooled', 'planner_b'])
def test_the_committed_h200_profiles_are_migrated(part: str) -> None:
    profile, _ = load_profile(RUN12 / part / 'profile.json')
    assert not profile.compression_measured
    assert profile.settings['compression'] == migrate_profile.NOT_MEASURED
