"""What a plan promises the node: predicted milliseconds per stage and the CPU they assume.

The predictor times the GPU's engines and one host thread issuing the work at the speed it was
profiled at (`MachineInfo.cpu_name`, its cores and torch threads). A node whose host thread gets
less of the CPU (decode-ahead, ROS callbacks, the rest of a vehicle's stack on the same cores)
runs the phases that follow the CPU slower than predicted. The plan file carries both, so the
node's diagnostics can hold each measured stage against its prediction and name the assumption.
"""
from __future__ import annotations

from alpamayo_offload.planning.params import PREDICTED_STAGES
from alpamayo_offload.planning.predictor import Prediction
from alpamayo_offload.planning.profile import GUIDANCE_PHASES, Profile


def predicted_stage_ms(prediction: Prediction) -> dict[str, float]:
    """Predicted ms of every stage in `PREDICTED_STAGES` (host: pre- plus postprocessing).

    Navigation guidance's unguided passes count as prefill, as the engine's timings count them.
    """
    phases = {p.name: p.wall_ms for p in prediction.phases}
    stages = {s: phases.get(s, 0.0) for s in PREDICTED_STAGES}
    stages['prefill'] += sum(phases.get(p, 0.0) for p in sorted(GUIDANCE_PHASES))
    return {**stages, 'host': prediction.host_ms, 'total': prediction.total_ms}


def cpu_budget(profile: Profile, prediction: Prediction, cpu_headroom: float = 1.0) -> str:
    """Say in one line which CPU the prediction assumes (for `plan.cpu_budget`)."""
    machine = profile.machine
    cpu = machine.cpu_name or 'the profiling machine\'s CPU (not recorded in the profile)'
    facts = [f'{machine.cpu_cores} cores'] if machine.cpu_cores else []
    if machine.torch_threads:
        facts.append(f'torch threads {machine.torch_threads}')
    where = f'{cpu} ({", ".join(facts)})' if facts else cpu
    headroom = f', allowing it {cpu_headroom:g}x slower' if cpu_headroom > 1.0 else ''
    following = ', '.join(prediction.cpu_sensitive_phases()) or 'none'
    return (f'one host thread issuing GPU work at its profiled speed on {where}{headroom}; host '
            f'pre/postprocessing {prediction.host_ms:.1f} ms; phases following the CPU: '
            f'{following}; decode-ahead, ROS callbacks and other processes on other cores')
