"""Plan parameter file (exact keys, [-1] convention, ROS-loadable) and budget parsing."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from alpamayo_offload.app.param_file import flatten_parameters
from alpamayo_offload.planning.errors import BudgetError, PlanFileError
from alpamayo_offload.planning.params import (
    COMPRESSION_KEYS,
    PARAM_KEYS,
    PREDICTED_STAGES,
    PREDICTION_KEYS,
    WORKLOAD_KEYS,
    PlanParams,
    read_plan_params,
    resident_from_param,
    resident_to_param,
    split_profile_ref,
    write_plan_params,
)
from alpamayo_offload.planning.units import format_bytes, parse_budget, parse_bytes

GIB = 2**30




def test_empty_list_convention() -> None:
    assert resident_to_param([]) == [-1]
    assert resident_to_param([5, 0, 5]) == [0, 5]
    assert resident_from_param([-1]) == () and resident_from_param([]) == ()
    assert resident_from_param([3, 1]) == (1, 3)
    with pytest.raises(PlanFileError, match=r'\[-1\]'):
        resident_from_param([-1, 2])


def test_yaml_has_exact_keys_and_round_trips(tmp_path: Path) -> None:
    params = PlanParams(resident={'lm': (0, 7, 14), 'expert': ()}, embed_on_host=True,
                        vram_budget='12.000GiB', predicted_latency_s=4.0567,
                        profile='/tmp/p.json#sha256=abc', fused_norms=False)
    path = tmp_path / 'config' / 'residency.param.yaml'
    write_plan_params(path, params, header='test\nsecond line')
    raw = yaml.safe_load(path.read_text())
    assert list(raw) == ['/**'] and list(raw['/**']) == ['ros__parameters']
    flat = flatten_parameters(raw['/**']['ros__parameters'])
    assert tuple(flat) == tuple(k for k in PARAM_KEYS
                                if k not in COMPRESSION_KEYS + PREDICTION_KEYS + WORKLOAD_KEYS)
    assert flat['resident_layers.vit'] == [-1] and flat['resident_layers.lm'] == [0, 7, 14]
    assert isinstance(flat['embed_on_host'], bool) and flat['vram_budget'] == '12.000GiB'
    back = read_plan_params(path)
    assert back.resident == {'vit': (), 'lm': (0, 7, 14), 'expert': ()}
    assert back.embed_on_host and back.predicted_latency_s == pytest.approx(4.0567)
    assert split_profile_ref(back.profile) == ('/tmp/p.json', 'abc')
    assert back.fused_norms is False
    assert back.cpu_headroom == 1.0 and flat['plan.cpu_headroom'] == 1.0


def test_plan_files_record_the_cpu_headroom_and_older_files_read_as_one(
        tmp_path: Path) -> None:
    path = tmp_path / 'safe.yaml'
    write_plan_params(path, PlanParams(resident={'lm': (1,)}, cpu_headroom=1.33))
    assert read_plan_params(path).cpu_headroom == 1.33
    text = path.read_text()
    path.write_text(text.replace('      cpu_headroom: 1.33\n', ''))
    assert read_plan_params(path).cpu_headroom == 1.0
    for bad, why in (("'fast'", 'must be a int or float'), ('0.5', 'must be from 1')):
        path.write_text(text.replace('cpu_headroom: 1.33', f'cpu_headroom: {bad}'))
        with pytest.raises(PlanFileError, match=why):
            read_plan_params(path)


def test_plan_files_carry_predicted_stages_and_the_cpu_budget(tmp_path: Path) -> None:
    """The node holds each stage against `plan.predicted_ms`; older files have none."""
    stages = dict(zip(PREDICTED_STAGES, (58.0, 100.5, 204.25, 804.0, 9.75, 1176.5), strict=True))
    path = tmp_path / 'plan.yaml'
    write_plan_params(path, PlanParams(resident={'lm': (1,)}, predicted_ms=stages,
                                       cpu_budget='one host thread at its profiled speed'))
    flat = flatten_parameters(yaml.safe_load(path.read_text())['/**']['ros__parameters'])
    assert tuple(flat)[-len(PREDICTION_KEYS):] == PREDICTION_KEYS
    assert flat['plan.predicted_ms.decode'] == 204.25
    back = read_plan_params(path)
    assert back.predicted_ms == stages and back.cpu_budget.startswith('one host thread')
    text = path.read_text()
    path.write_text(text[:text.index('    predicted_ms:')])
    assert read_plan_params(path).predicted_ms == {}
    with pytest.raises(ValueError, match='give all of'):
        PlanParams(predicted_ms={'decode': 1.0})
    path.write_text(text.replace('decode: 204.25', "decode: 'slow'"))
    with pytest.raises(PlanFileError, match=r"plan.predicted_ms.decode = 'slow'"):
        read_plan_params(path)


def test_compressed_layers_and_compression_round_trip(tmp_path: Path) -> None:
    path = tmp_path / 'packed.yaml'
    write_plan_params(path, PlanParams(resident={'lm': (0,)}, compressed={'lm': (2, 5),
                                                                          'expert': (1,)},
                                       compression='on'))
    flat = flatten_parameters(yaml.safe_load(path.read_text())['/**']['ros__parameters'])
    assert tuple(flat) == tuple(k for k in PARAM_KEYS if k != 'fused_norms'
                                and k not in PREDICTION_KEYS + WORKLOAD_KEYS)
    assert flat['compressed_layers.lm'] == [2, 5] and flat['compressed_layers.vit'] == [-1]
    assert flat['compression'] == 'on'
    back = read_plan_params(path)
    assert back.compressed == {'vit': (), 'lm': (2, 5), 'expert': (1,)}
    assert back.compression == 'on' and back.resident['lm'] == (0,)


def test_raw_plans_write_no_compression_keys_and_read_as_raw(tmp_path: Path) -> None:
    """A node that does not declare the compression keys reads a raw plan as before."""
    path = tmp_path / 'raw.yaml'
    write_plan_params(path, PlanParams(resident={'lm': (1,)}))
    text = path.read_text()
    assert 'compressed_layers' not in text and 'compression' not in text
    back = read_plan_params(path)
    assert back.compression == 'off' and back.compressed == {m: () for m in ('vit', 'lm',
                                                                            'expert')}


def test_bad_compression_in_plan_files_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="compression is 'off'"):
        PlanParams(compressed={'lm': (1,)})
    with pytest.raises(ValueError, match='both resident and compressed'):
        PlanParams(resident={'lm': (1,)}, compressed={'lm': (1,)}, compression='on')
    path = tmp_path / 'bad.yaml'
    write_plan_params(path, PlanParams(compressed={'lm': (1,)}, compression='on'))
    path.write_text(path.read_text().replace("compression: 'on'", 'compression: lossy')
                    .replace('compression: on', 'compression: lossy'))
    with pytest.raises(PlanFileError, match="compression = 'lossy'"):
        read_plan_params(path)


def test_plan_files_without_norms_leave_the_node_its_own(tmp_path: Path) -> None:
    """Files from before fused norms have no `fused_norms`; a wrong type is refused."""
    path = tmp_path / 'old.yaml'
    write_plan_params(path, PlanParams(resident={'lm': (1,)}))
    assert 'fused_norms' not in path.read_text()
    assert read_plan_params(path).fused_norms is None
    path.write_text(path.read_text().replace('embed_on_host: false',
                                             'embed_on_host: false\n    fused_norms: 1'))
    with pytest.raises(PlanFileError, match='fused_norms = 1 must be a bool or NoneType'):
        read_plan_params(path)


def test_ros_reads_the_file_with_typed_integer_arrays(tmp_path: Path) -> None:
    from rclpy.parameter import Parameter, parameter_dict_from_yaml_file

    path = tmp_path / 'plan.yaml'
    write_plan_params(path, PlanParams(resident={'lm': (0, 3)}, vram_budget='8GiB',
                                       fused_norms=True))
    got = parameter_dict_from_yaml_file(str(path), use_wildcard=True)
    assert set(got) == set(PARAM_KEYS) - set(COMPRESSION_KEYS) - set(PREDICTION_KEYS) \
        - set(WORKLOAD_KEYS)
    vit = Parameter.from_parameter_msg(got['resident_layers.vit'])
    assert vit.type_ is Parameter.Type.INTEGER_ARRAY and list(vit.value) == [-1]
    assert list(Parameter.from_parameter_msg(got['resident_layers.lm']).value) == [0, 3]
    assert Parameter.from_parameter_msg(got['embed_on_host']).value is False


def test_bad_plan_files(tmp_path: Path) -> None:
    (tmp_path / 'a.yaml').write_text('/**:\n  ros__parameters:\n    embed_on_host: true\n')
    with pytest.raises(PlanFileError, match='lacks key'):
        read_plan_params(tmp_path / 'a.yaml')
    with pytest.raises(PlanFileError, match='alpamayo-offload plan'):
        read_plan_params(tmp_path / 'none.yaml')
    with pytest.raises(ValueError, match='allowed'):
        PlanParams(resident={'unet': (1,)})


@pytest.mark.parametrize(('spec', 'free', 'expected'), [
    ('12GiB', None, 12 * GIB), ('1.5 GB', None, 1_500_000_000), ('800MiB', None, 800 * 2**20),
    ('4096', None, 4096), ('free-2GiB', 10 * GIB, 8 * GIB), ('0.8free', 10 * GIB, 8 * GIB),
    ('0.5*free', 4 * GIB, 2 * GIB)])
def test_parse_budget(spec: str, free: int | None, expected: int) -> None:
    assert parse_budget(spec, free) == expected


@pytest.mark.parametrize(('spec', 'free', 'match'), [
    ('12 parsecs', None, 'not understood'), ('free-2GiB', None, 'no GPU'),
    ('1.5free', GIB, r'\(0, 1\]'), ('free-20GiB', GIB, 'positive')])
def test_parse_budget_errors(spec: str, free: int | None, match: str) -> None:
    with pytest.raises(BudgetError, match=match):
        parse_budget(spec, free)


def test_format_bytes_round_trips() -> None:
    for n in (GIB, 12 * GIB + 12345, 3 * 2**20):
        assert abs(parse_bytes(format_bytes(n)) - n) <= 2**20
