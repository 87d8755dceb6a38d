"""Switch transformers modules to a subclass in place, keeping their weights and keys."""
from __future__ import annotations

from typing import Any

from torch import nn


def swap_class(model: nn.Module, old: type[nn.Module], new: type[nn.Module],
               **shared: Any) -> int:
    """Make every module of exactly type `old` in `model` a `new`; return how many.

    Only the class changes, so parameters, buffers, checkpoint keys and the runtime's view of
    them stay as they are; `shared` attributes are set on each (one object for all of them).
    Modules already swapped are not of type `old`, so a second call changes nothing.
    """
    found = [m for m in model.modules() if type(m) is old]
    for m in found:
        m.__class__ = new
        for name, value in shared.items():
            setattr(m, name, value)
    return len(found)
