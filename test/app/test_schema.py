"""The one parameter schema: coercion rules, refusals that name the parameter, unknown names."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from alpamayo_offload.app import schema
from alpamayo_offload.app.errors import ParameterError
from alpamayo_offload.app.param_file import (
    ParameterFileError,
    flatten_parameters,
    read_param_file,
)

CONFIG = Path(__file__).resolve().parents[2] / 'config' / 'alpamayo_offload.yaml'


def yaml_values() -> dict:
    return flatten_parameters(yaml.safe_load(CONFIG.read_text())['/**']['ros__parameters'])


def test_the_package_file_sets_every_parameter_at_its_default() -> None:
    assert yaml_values() == schema.defaults()


def test_every_spec_is_consistent() -> None:
    for name, spec in schema.PARAMETERS.items():
        assert spec.name == name and spec.description
        assert schema.check_value(name, spec.default) == spec.default, name
        if spec.minimum is not None or spec.maximum is not None:
            assert spec.kind.element in (schema.Kind.INTEGER, schema.Kind.DOUBLE), name
    assert schema.RESTART_ONLY == {n for n, s in schema.PARAMETERS.items() if s.restart}
    assert 'inference.period_s' not in schema.RESTART_ONLY and 'model' in schema.RESTART_ONLY


def test_an_integer_for_a_float_is_that_float() -> None:
    got = schema.validate({'inference.period_s': 1, 'odometry.rear_axle_offset': [-1, 0, 0.5]})
    assert got == {'inference.period_s': 1.0, 'odometry.rear_axle_offset': [-1.0, 0.0, 0.5]}
    assert isinstance(got['inference.period_s'], float)


@pytest.mark.parametrize(('name', 'value', 'match'), [
    ('sync.frame_tolerance_s', '0.05',
     r"sync.frame_tolerance_s: expected a float \(s\) > 0, got the string '0.05' "
     r'\(write numbers without quotes\)'),
    ('buffers.camera_depth', '20', r"buffers.camera_depth: expected an integer.*string '20'"),
    ('buffers.camera_depth', True, r'buffers.camera_depth: expected an integer.*bool True'),
    ('inference.period_s', False, r'inference.period_s: expected a float.*bool False'),
    ('buffers.camera_depth', 20.0, r'buffers.camera_depth: expected an integer.*float 20.0'),
    ('output.publish_odom_path', 1, r'publish_odom_path: expected a bool, got the integer 1'),
    ('inference.period_s', -1, r'inference.period_s: expected a float \(s\) > 0, got the '
                               r'integer -1'),
    ('inference.period_s', 0.0, r'inference.period_s: expected a float \(s\) > 0'),
    ('inference.period_s', float('nan'), r'inference.period_s: expected'),
    ('mode', 'fast', r"mode: expected a string, one of 'preload', 'sequential', 'pipelined', "
                     r"got the string 'fast'"),
    ('cameras.transports', ['raw', 'h264'], r"cameras.transports: expected a list of strings, "
                                            r"each one of 'raw', 'compressed'"),
    ('cameras.slots', [0, 7], r'cameras.slots: expected a list of integers, each in \[0, 6\]'),
    ('odometry.rear_axle_offset', [0.0, 1.0], r'rear_axle_offset: expected .*3 elements'),
    ('odometry.rear_axle_offset', '0,0,0', r'rear_axle_offset: expected a list of floats'),
    ('resident_layers.lm', [], r'resident_layers.lm: .*empty list.*write \[-1\] for none'),
    ('resident_layers.lm', None, r'resident_layers.lm: .*empty list'),   # how ROS reads []
    ('model', None, r'model: expected a string, got nothing \(null\)'),
    ('decode.max_tokens', 0, r'decode.max_tokens: expected an integer \(tokens\) >= 1'),
])
def test_refusals_name_the_parameter_and_say_expected_and_got(name: str, value: object,
                                                              match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        schema.validate({name: value})


def test_unknown_names_are_refused_with_the_valid_ones_and_a_suggestion() -> None:
    with pytest.raises(ParameterError) as err:
        schema.validate({'sync.frame_tolerence_s': 0.1, 'model': 'tiny'})
    text = str(err.value)
    assert "unknown parameter 'sync.frame_tolerence_s' (did you mean " \
           "'sync.frame_tolerance_s'?)" in text
    assert 'valid names: model, device, mode' in text and 'diagnostics.period_s' in text


def test_ros_own_and_planner_keys_are_not_unknown() -> None:
    got = schema.validate({'use_sim_time': True, 'start_type_description_service': False,
                           'qos_overrides./diagnostics.publisher.depth': 5,
                           'plan.predicted_latency_s': 1.5})
    assert got == {'plan.predicted_latency_s': 1.5}   # ROS's own names are not node settings


def test_every_problem_is_in_one_error() -> None:
    with pytest.raises(ParameterError) as err:
        schema.validate({'mode': 'fast', 'inference.period_s': '1', 'typo': 1})
    assert all(name in str(err.value) for name in ('mode', 'inference.period_s', "'typo'"))


def test_descriptions_carry_unit_range_and_restart() -> None:
    text = schema.PARAMETERS['sync.frame_tolerance_s'].ros_description()
    assert text.endswith('[unit: s; > 0]')
    assert 'restart' in schema.PARAMETERS['model'].ros_description()


def test_parameter_file_reader_reads_the_global_and_the_node_section(tmp_path: Path) -> None:
    f = tmp_path / 'p.yaml'
    f.write_text('/**:\n  ros__parameters:\n    sync: {frame_tolerance_s: 0.1}\n    model: a\n'
                 'alpamayo_offload_node:\n  ros__parameters:\n    model: b\n'
                 'other_node:\n  ros__parameters:\n    model: c\n')
    assert read_param_file(f) == {'sync.frame_tolerance_s': 0.1, 'model': 'b'}
    assert read_param_file(f, 'other_node')['model'] == 'c'
    f.write_text('other_node:\n  ros__parameters:\n    model: x\n')
    with pytest.raises(ParameterFileError, match=r'has no `/\*\*: ros__parameters`'):
        read_param_file(f)
    with pytest.raises(ParameterFileError, match='cannot read parameter file'):
        read_param_file(tmp_path / 'missing.yaml')


def test_cameras_are_subscribed_reliable_by_default() -> None:
    # Measured (bench/bench_qos.py, docs/benchmarks.md "Camera QoS"): through Fast DDS on one host,
    # best-effort subscriptions lost 79-94 % of raw 1920x1080 frames at 10-30 Hz (a frame missing
    # one fragment is dropped whole), reliable keep-last 5 lost none at 4 x 10 Hz and 1 x 10-30 Hz;
    # compressed JPEG frames arrived either way. Reliable also matches what `ros2 bag play`,
    # image_transport and the CARLA bridge publish; best-effort publishers need 'best_effort'.
    spec = schema.PARAMETERS['cameras.reliability']
    assert spec.default == 'reliable'
    assert set(spec.choices) == {'reliable', 'best_effort'} and spec.restart


def test_the_2super_file_over_the_package_file_gives_six_release_cameras() -> None:
    from alpamayo_offload.app.config import config_from_values

    values = read_param_file(CONFIG) | read_param_file(CONFIG.with_name(
        'alpamayo_offload_2super.yaml'))
    cfg = config_from_values(values)
    assert cfg.engine.model == 'tiny-2super'
    assert [c.slot for c in cfg.cameras] == [0, 1, 2, 3, 5, 6]
    assert [c.topic for c in cfg.cameras] == [f'~/input/camera_{s}/image'
                                              for s in (0, 1, 2, 3, 5, 6)]
    assert cfg.assembly.camera_slots == (0, 1, 2, 3, 5, 6) and cfg.engine.num_cameras == 6
