"""The identity string that ties a profile to the model it measured."""
from __future__ import annotations

import hashlib
from pathlib import Path


def model_identity(model: str) -> str:
    """Identify a preset by name and a checkpoint by the hash of its config and weight index.

    Hashing the small JSON files (not the weights) makes the check cheap and still tells two
    checkpoints apart.
    """
    path = Path(model)
    if not path.is_dir():
        return f'preset:{model}'
    digest = hashlib.sha256()
    for name in ('config.json', 'model.safetensors.index.json'):
        if (path / name).is_file():
            digest.update((path / name).read_bytes())
    return f'checkpoint:{path.name}:{digest.hexdigest()[:16]}'
