"""A plan file written by the planner's own writer, as the node's second parameter file."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from alpamayo_offload.app.synthetic_drive import DriveConfig, write_drive
from alpamayo_offload.planning import PlanParams, write_plan_params
from alpamayo_offload.ros.demo import remaps_for
from alpamayo_offload.ros.session import default_params_file, run_session

pytestmark = pytest.mark.slow


def test_node_runs_the_planner_file_and_reports_its_resident_layers(tmp_path: Path) -> None:
    plan = tmp_path / 'residency.param.yaml'
    write_plan_params(plan, PlanParams(
        resident={'vit': (2, 0), 'lm': (1,), 'expert': ()}, embed_on_host=True,
        fused_norms=False, vram_budget='2.000GiB', predicted_latency_s=0.25,
        profile='profile.json#sha256=00ff'),
        header='Written by the test with planning.write_plan_params')
    written = yaml.safe_load(plan.read_text())['/**']['ros__parameters']
    assert written['resident_layers']['expert'] == [-1]          # the planner's "none"
    drive = DriveConfig(duration_s=3.0)
    res = run_session(write_drive(tmp_path / 'bag', drive),
                      param_files=[default_params_file(), plan], remaps=remaps_for(drive),
                      overrides={'inference.period_s': '0.2', 'images.height': '64',
                                 'images.width': '96'})
    assert res.node_alive_at_end, res.node_output[-3000:]
    assert any(p.topic.endswith('/path') for p in res.paths), res.node_output[-3000:]
    model = res.status('model')[-1]
    assert model.level == 0, model
    values = model.values
    assert values['model_state'] == 'ready', values
    assert (values['resident_layers.vit'], values['resident_layers.lm'],
            values['resident_layers.expert']) == ('0,2', '1', 'none')
    assert values['embed_on_host'] == 'True'
    assert 'norms=per-op,' in values['kernel_settings']     # the plan's norms, not fused
    assert values['vram_budget'] == '2.000GiB'
    assert int(values['vram_budget_bytes']) == 2 * 2**30
    assert 0 < int(values['vram_required_bytes']) <= 2 * 2**30
    assert float(values['plan.predicted_latency_s']) == 0.25
    assert values['plan.profile'] == 'profile.json#sha256=00ff'
