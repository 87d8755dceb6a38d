"""Time-correct input assembly shared by the ROS node and rosbag replay (numpy, OpenCV, PIL)."""
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
from .convert import ConverterChoice, choose_converter
from .decode import (
    DEFAULT_MAX_PIXELS,
    Decoded,
    DecodeOptions,
    FrameSize,
    FrameSizing,
    JpegDecoder,
    PixelJob,
    PixelWorkerError,
    decode_image,
    run_pixel_job,
)
from .decode_ahead import DecodeAheadBuffer, DecodeAheadStats
from .decode_workers import DECODE_WORKER_FAILED, DecodeWorkers, WorkerFaults
from .encodings import RAW_ENCODINGS, compressed_codec, supported_encodings
from .errors import InputError
from .messages import EncodedImage, OdometrySample, image_from_msg, odometry_from_msg

__all__ = [
    'DECODE_WORKER_FAILED', 'DEFAULT_MAX_PIXELS', 'RAW_ENCODINGS', 'AssemblyConfig',
    'ConverterChoice', 'DecodeAheadBuffer', 'DecodeAheadStats', 'DecodeOptions',
    'DecodeWorkers', 'Decoded', 'DecodedLookup', 'EncodedImage', 'FrameSize', 'FrameSizing',
    'InputError', 'JpegDecoder', 'ModelInput', 'OdometrySample', 'PixelJob', 'PixelWorkerError',
    'Pose', 'Selection', 'StampedBuffer', 'WorkerFaults', 'assemble', 'check_resolution',
    'choose_converter', 'compressed_codec', 'decode_image', 'decode_selection',
    'future_ground_truth', 'image_from_msg', 'odometry_from_msg', 'run_pixel_job',
    'select_inputs', 'supported_encodings',
]
