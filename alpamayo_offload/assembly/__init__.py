"""Time-correct input assembly shared by the ROS node and rosbag replay (numpy + PIL only)."""
from .assembler import (
    AssemblyConfig,
    DecodedLookup,
    ModelInput,
    Pose,
    Selection,
    assemble,
    check_resolution,
    decode_selection,
    future_ground_truth,
    select_inputs,
)
from .buffers import StampedBuffer
from .decode import Decoded, FrameSize, FrameSizing, decode_image
from .decode_ahead import DecodeAheadBuffer, DecodeAheadStats
from .errors import InputError
from .messages import EncodedImage, OdometrySample, image_from_msg, odometry_from_msg

__all__ = [
    'AssemblyConfig', 'DecodeAheadBuffer', 'DecodeAheadStats', 'Decoded', 'DecodedLookup',
    'EncodedImage', 'FrameSize', 'FrameSizing', 'InputError', 'ModelInput', 'OdometrySample',
    'Pose', 'Selection', 'StampedBuffer', 'assemble', 'check_resolution', 'decode_image',
    'decode_selection', 'future_ground_truth', 'image_from_msg', 'odometry_from_msg',
    'select_inputs',
]
