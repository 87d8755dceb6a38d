"""JPEG decoding on the GPU (nvJPEG through `torchvision.io.decode_jpeg`), for `images.decoder`.

The node hands an instance to input assembly, which knows it only as a `JpegDecoder` (a `name`
and `decode(bytes) -> (H, W, 3) uint8 RGB` on the host): assembly never imports torch. The
pixels come back to host memory because the assembled model input is a NumPy array. Decoding
runs on a stream of its own, so it never queues behind (or holds up) the engine's compute and
copy streams; only that stream is waited for when the pixels are copied back.
"""
from __future__ import annotations

import numpy as np
import torch


class GpuJpegUnavailableError(RuntimeError):
    """GPU JPEG decoding cannot run here (no torchvision, or no CUDA device)."""


class TorchvisionJpegDecoder:
    """Decodes JPEG bytes on a CUDA device with torchvision's nvJPEG binding."""

    name = 'gpu (torchvision nvJPEG)'

    def __init__(self, device: str) -> None:
        try:
            from torchvision.io import ImageReadMode, decode_jpeg  # noqa: PLC0415 - optional
        except ImportError as err:
            raise GpuJpegUnavailableError(f"images.decoder 'gpu' needs torchvision ({err}); "
                                          "install torchvision matching torch, or use 'cpu'"
                                          ) from err
        if not device.startswith('cuda') or not torch.cuda.is_available():
            raise GpuJpegUnavailableError(f"images.decoder 'gpu' needs a CUDA device (device "
                                          f"{device!r}, CUDA available: "
                                          f"{torch.cuda.is_available()}); use 'cpu'")
        self._decode = decode_jpeg
        self._mode = ImageReadMode.RGB
        self._device = torch.device(device)
        self._stream = torch.cuda.Stream(self._device)

    def decode(self, data: bytes) -> np.ndarray:
        """Full-size (H, W, 3) uint8 RGB, copied back to the host."""
        encoded = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        with torch.cuda.stream(self._stream):
            image = self._decode(encoded, mode=self._mode, device=self._device)
            return image.permute(1, 2, 0).contiguous().cpu().numpy()
