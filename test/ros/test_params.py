from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from rclpy.parameter import Parameter

from alpamayo_offload.ros import params
from alpamayo_offload.app.errors import ParameterError
from alpamayo_offload.ros.node_config import flatten_parameters

CONFIG = Path(__file__).resolve().parents[2] / 'config' / 'alpamayo_offload.yaml'




def yaml_values() -> dict:
    return flatten_parameters(yaml.safe_load(CONFIG.read_text())['/**']['ros__parameters'])


def test_yaml_keys_match_declared_parameters() -> None:
    assert set(yaml_values()) == set(params.PARAMETERS)


def test_yaml_defaults_equal_declared_defaults() -> None:
    for name, value in yaml_values().items():
        assert value == params.PARAMETERS[name][0], name


def test_default_config_and_planner_overrides() -> None:
    values = yaml_values()
    cfg = params.config_from_values(values)
    assert cfg.engine['resident'] == {} and cfg.vram_budget == ''
    assert cfg.engine['embed_on_host'] is False and cfg.torch_threads == 1
    assert cfg.decode_ahead is True and cfg.decode_ahead_min_interval_s == 0.08
    assert [c.slot for c in cfg.cameras] == [0, 1, 2, 6]
    planner = {'vram_budget': '12.000GiB', 'resident_layers.lm': [6, 0, 3],
               'resident_layers.vit': [1], 'resident_layers.expert': [-1],
               'embed_on_host': True, 'plan.predicted_latency_s': 2.5}
    cfg = params.config_from_values(values | planner)
    assert cfg.engine['resident'] == {'lm': (0, 3, 6), 'vit': (1,)}
    assert cfg.engine['embed_on_host'] is True
    assert cfg.vram_budget == '12.000GiB'
    assert cfg.plan_info == {'plan.predicted_latency_s': 2.5}


def test_relative_budget_needs_cuda_and_says_so() -> None:
    values = yaml_values() | {'vram_budget': 'free-2GiB'}
    with pytest.raises(ParameterError, match=r"relative to free VRAM.*device is 'cpu'"):
        params.config_from_values(values)
    assert params.config_from_values(values | {'device': 'cuda'}).vram_budget == 'free-2GiB'
    with pytest.raises(ParameterError, match='vram_budget'):
        params.config_from_values(yaml_values() | {'vram_budget': '12 parsecs'})
    with pytest.raises(ParameterError, match='vram_budget'):
        params.config_from_values(yaml_values() | {'vram_budget': 12 * 2**30})


@pytest.mark.parametrize(('key', 'value', 'match'), [
    ('cameras.transports', ['raw', 'h264', 'raw', 'raw'], 'cameras.transports'),
    ('cameras.slots', [0, 1, 2], 'equal length'),
    ('images.height', 64, 'images.height'),     # without images.width (0)
    ('mode', 'fast', 'mode'),
    ('sync.frame_tolerance_s', -1.0, 'frame_tolerance_s'),
    ('inference.period_s', 0.0, 'period_s'),
    ('inference.threads', -1, 'inference.threads'),
    ('images.decode_ahead_min_interval_s', -0.1, 'images.decode_ahead_min_interval_s'),
    ('resident_layers.lm', [0, -1], 'resident_layers.lm'),
])
def test_bad_values_are_rejected_with_the_name(key: str, value: object, match: str) -> None:
    with pytest.raises(ParameterError, match=match):
        params.config_from_values(yaml_values() | {key: value})


def test_runtime_update_rules() -> None:
    values = yaml_values()
    cfg, reason = params.check_update(values, [Parameter('inference.period_s', value=0.2)])
    assert cfg is not None and cfg.period_s == 0.2 and reason == ''
    cfg, reason = params.check_update(values, [Parameter('model', value='/ckpt')])
    assert cfg is None and 'restart' in reason
    cfg, reason = params.check_update(values, [Parameter('sync.max_input_age_s', value=-1.0)])
    assert cfg is None and 'max_input_age_s' in reason
