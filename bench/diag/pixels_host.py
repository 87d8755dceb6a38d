"""How much host time does making the pixels of one inference take, the old way and the new?

Until the pixels were made on the model's device, the host built the float32 pixels of 16
release-size frames (numpy, `preprocess_images` on the CPU), and the vision pass cast them to
the model's dtype and copied them from pageable memory. Now, for a model on a GPU, the host
reorders the uint8 patches and copies them through pinned memory; the lookup runs on the GPU.
This times, at the release's frame size, median of --runs: the pieces (the numpy pixels, the
uint8 reordering both ways keep, the cast), then with CUDA the host part of each way, without
it torch's lookup on the CPU (why the CPU keeps numpy's). No model is loaded.

    .venv/bin/python bench/diag/pixels_host.py --out /tmp/pixels_host        # this CPU
    python3 bench/diag/pixels_host.py --out $OUT/pixels_host                  # the GPU machine
"""
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from diag_cli import parse_args  # noqa: E402
from PIL import Image  # noqa: E402

from alpamayo_offload.engine.example import example_input  # noqa: E402
from alpamayo_offload.model.config import full_config  # noqa: E402
from alpamayo_offload.model.inputs import (  # noqa: E402
    ImageSizing,
    lookup_pixels,
    preprocess_images,
    reorder_patches,
)


def median_ms(fn: Callable[[], object], runs: int, sync: bool) -> float:
    """Median host milliseconds of `fn` (after the device went idle, if `sync`)."""
    fn()
    times = []
    for _ in range(runs):
        if sync:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def main() -> None:
    args = parse_args(__doc__, runs=10, norms_flag=False)
    cfg = full_config()
    sizing = ImageSizing.of(cfg)
    images = np.stack([np.stack([np.asarray(sizing.resize(Image.fromarray(f))) for f in cam])
                       for cam in example_input(1080, 1920).images])
    bf16 = torch.bfloat16
    cuda = torch.cuda.is_available()
    got: dict[str, float] = {
        'numpy pixels (float32, host)': median_ms(lambda: preprocess_images(images, cfg),
                                                  args.runs, False),
    }
    got['uint8 patch reordering (host, both ways)'] = median_ms(
        lambda: reorder_patches(images, cfg), args.runs, False)
    pixels, _ = preprocess_images(images, cfg)
    got['cast to bf16 (host)'] = median_ms(lambda: pixels.to(bf16), args.runs, False)
    if cuda:
        got['old: numpy pixels, then .to(cuda, bf16)'] = median_ms(
            lambda: preprocess_images(images, cfg)[0].to('cuda', bf16), args.runs, True)
        got['new: uint8 patches pinned, lookup on the GPU'] = median_ms(
            lambda: preprocess_images(images, cfg, device='cuda', dtype=bf16), args.runs, True)
    else:
        patches = torch.from_numpy(reorder_patches(images, cfg)[0])
        table = torch.zeros(3, 256, dtype=bf16)
        got['torch lookup on the CPU (bf16)'] = median_ms(
            lambda: lookup_pixels(patches, table, cfg.vision.temporal_patch_size), args.runs,
            False)
    (args.out / 'pixels_host.json').write_text(json.dumps(
        {'cuda': cuda, 'device': torch.cuda.get_device_name() if cuda else 'cpu',
         'threads': torch.get_num_threads(), 'runs': args.runs, 'median_host_ms': got},
        indent=1) + '\n')
    for name, ms in got.items():
        print(f'{name:48s} {ms:7.2f} ms')


if __name__ == '__main__':
    main()
