"""Model-agnostic layer offloading: resident layers stay on the device, the rest stream.

Public interface (see docs/design.md): :class:`OffloadRuntime`, :class:`LayerSequence`,
:class:`ResidencyPlan`, :class:`Mode`, the :class:`TensorSource` protocol, :class:`HostStore`,
the stats types, the lossless codecs (:class:`Compression`, :func:`select_codec`) and their
on-disk cache (:class:`CompressionCache`).
"""
from __future__ import annotations

from .accounting import LayerFootprint, VramPlan, layer_footprint
from .codec import (
    Codec,
    CodecError,
    CodecIndex,
    Compressed,
    Compression,
    NvcompAnsCodec,
    PlaneZlibCodec,
    select_codec,
)
from .codec_cache import CompressionCache, CompressionStats
from .config import LayerSequence, Mode, ResidencyPlan
from .errors import (
    BudgetError,
    HostMemoryError,
    LayerError,
    OffloadError,
    PlanError,
    SourceError,
    StateError,
)
from .layout import TensorSpec
from .offload import OffloadRuntime
from .source import StateDictSource, TensorSource
from .store import HostStore
from .timing import LayerCallStats, RuntimeStats, SequenceTotals

__all__ = [
    'BudgetError',
    'Codec',
    'CodecError',
    'CodecIndex',
    'Compressed',
    'Compression',
    'CompressionCache',
    'CompressionStats',
    'NvcompAnsCodec',
    'PlaneZlibCodec',
    'select_codec',
    'HostMemoryError',
    'HostStore',
    'LayerFootprint',
    'LayerCallStats',
    'LayerError',
    'LayerSequence',
    'Mode',
    'OffloadError',
    'OffloadRuntime',
    'PlanError',
    'ResidencyPlan',
    'RuntimeStats',
    'SequenceTotals',
    'SourceError',
    'StateDictSource',
    'StateError',
    'TensorSource',
    'TensorSpec',
    'VramPlan',
    'layer_footprint',
]
