"""LFM2-VL's image processor on torch alone (no torchvision), for machines without torchvision.

transformers' `Lfm2VlImageProcessor` (image_processing_lfm2_vl.py, 5.24) is a `TorchvisionBackend`, imports
torchvision at module level and has no PIL twin. This is the same algorithm, step for step, on the tensor ops
torchvision itself calls for tensors (`torch.nn.functional.interpolate`, antialiased bilinear, rounded back to
uint8):

- an image whose size, rounded to the 32 px factor (`encoder_patch_size` x `downsample_factor`), is over
  `max_image_tokens` x 32^2 x `max_pixels_tolerance` pixels is *large*: resized onto the closest-aspect grid of
  `min_tiles`..`max_tiles` tiles of `tile_size` px, split row-major, plus a thumbnail (`use_thumbnail`) at the
  smart-resized size below;
- any other image is smart-resized (each side a multiple of 32, its pixels between `min_image_tokens` and
  `max_image_tokens` x 32^2, the aspect ratio kept) and is one tile;
- each tile is normalised, cut into `encoder_patch_size` patches (the NaFlex layout: a row of patches,
  `spatial_shapes` its grid) and padded with zero patches to the processor's most (`pixel_attention_mask` 0).

The token arithmetic stays in transformers' `Lfm2VlProcessor` (it reads `image_rows` / `image_cols` /
`image_sizes`, written here as there). Where torchvision is installed a saved folder still loads through this
class (models/family/lfm2_vl.py `processor_from_folder`): the pixels are torchvision's up to the rounding of a
resize, the counts the same.
"""

from __future__ import annotations

import math

import numpy as np
from transformers.image_processing_utils import BaseImageProcessor, BatchFeature
from transformers.processing_utils import ImagesKwargs

SETTINGS = ("downsample_factor", "do_image_splitting", "min_tiles", "max_tiles", "use_thumbnail", "min_image_tokens",
            "max_image_tokens", "encoder_patch_size", "tile_size", "max_pixels_tolerance", "image_mean", "image_std")


class Lfm2VlImagesKwargs(ImagesKwargs, total=False):
    """The call-time settings Lfm2VlProcessor validates and passes (transformers' Lfm2VlImageProcessorKwargs, which
    lives in the torchvision module)."""
    downsample_factor: int
    do_image_splitting: bool
    min_tiles: int
    max_tiles: int
    use_thumbnail: bool
    min_image_tokens: int
    max_image_tokens: int
    encoder_patch_size: int
    tile_size: int
    max_pixels_tolerance: float
    do_pad: bool
    return_row_col_info: bool


class Lfm2VlImageProcessorTorch(BaseImageProcessor):
    valid_kwargs = Lfm2VlImagesKwargs
    model_input_names = ["pixel_values", "pixel_attention_mask", "spatial_shapes"]

    def __init__(self, downsample_factor: int = 2, do_image_splitting: bool = True, min_tiles: int = 2,
                 max_tiles: int = 10, use_thumbnail: bool = True, min_image_tokens: int = 64,
                 max_image_tokens: int = 256, encoder_patch_size: int = 16, tile_size: int = 512,
                 max_pixels_tolerance: float = 2.0, image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5), **kwargs):
        super().__init__(**kwargs)
        self.downsample_factor, self.do_image_splitting = downsample_factor, do_image_splitting
        self.min_tiles, self.max_tiles, self.use_thumbnail = min_tiles, max_tiles, use_thumbnail
        self.min_image_tokens, self.max_image_tokens = min_image_tokens, max_image_tokens
        self.encoder_patch_size, self.tile_size = encoder_patch_size, tile_size
        self.max_pixels_tolerance = max_pixels_tolerance
        self.image_mean, self.image_std = list(image_mean), list(image_std)

    def to_dict(self) -> dict:
        # saved as transformers' own class with the same settings: a folder mmtune writes (a checkpoint, an export)
        # loads with plain AutoProcessor where torchvision is installed, as the hub's does
        return {**super().to_dict(), "image_processor_type": "Lfm2VlImageProcessor"}

    @property
    def max_num_patches(self) -> int:
        """Patches every tile is padded to: a thumbnail's most or a whole tile's, the larger."""
        tile = (self.tile_size // self.encoder_patch_size) ** 2 if self.do_image_splitting else 0
        return max(self.max_image_tokens * self.downsample_factor ** 2, tile)

    # ---------------------------------------------------------------- sizes (transformers' arithmetic)
    def smart_resize(self, height: int, width: int) -> tuple[int, int]:
        """(width, height) of a one-tile image or a thumbnail."""
        f = self.encoder_patch_size * self.downsample_factor
        lo, hi = self.min_image_tokens * f * f, self.max_image_tokens * f * f
        h = max(f, round(height / f) * f)
        w = max(f, round(width / f) * f)
        if h * w > hi:
            beta = math.sqrt(height * width / hi)
            h, w = max(f, math.floor(height / beta / f) * f), max(f, math.floor(width / beta / f) * f)
        elif h * w < lo:
            beta = math.sqrt(lo / (height * width))
            h, w = math.ceil(height * beta / f) * f, math.ceil(width * beta / f) * f
        return w, h

    def _too_large(self, height: int, width: int) -> bool:
        f = self.encoder_patch_size * self.downsample_factor
        h = max(self.encoder_patch_size, round(height / f) * f)
        w = max(self.encoder_patch_size, round(width / f) * f)
        return h * w > self.max_image_tokens * f * f * self.max_pixels_tolerance

    def grid(self, height: int, width: int) -> tuple[int, int]:
        """(cols, rows) of a large image's tiles: the closest aspect ratio, ties to the larger grid when the image
        covers more than half of it."""
        lo, hi = self.min_tiles, self.max_tiles
        ratios = sorted({(w, h) for n in range(lo, hi + 1) for w in range(1, n + 1) for h in range(1, n + 1)
                         if lo <= w * h <= hi}, key=lambda r: r[0] * r[1])
        aspect, best, best_diff = width / height, (1, 1), float("inf")
        for r in ratios:
            diff = abs(aspect - r[0] / r[1])
            if diff < best_diff:
                best_diff, best = diff, r
            elif diff == best_diff and width * height > 0.5 * self.tile_size ** 2 * r[0] * r[1]:
                best = r
        return best

    def layout(self, height: int, width: int) -> tuple[int, int, list[int]]:
        """(rows, cols, [height, width] of the one tile / thumbnail) for an image of this pixel size."""
        new_w, new_h = self.smart_resize(height, width)
        splitting = self.do_image_splitting and not self.min_tiles == self.max_tiles == 1
        if splitting and self._too_large(height, width):
            cols, rows = self.grid(height, width)
            return rows, cols, [new_h, new_w]
        return 1, 1, [new_h, new_w]

    # ---------------------------------------------------------------- pixels
    @staticmethod
    def _resize(x, height: int, width: int):
        import torch.nn.functional as F

        # torchvision's tensor resize of a uint8 image: antialiased bilinear, rounded back to uint8
        y = F.interpolate(x[None].float(), size=(height, width), mode="bilinear", antialias=True, align_corners=False)
        return y.round().clamp(0, 255)[0]

    def _patches(self, tile):
        """(max_num_patches, p*p*3) patches of one normalised tile, its mask and its (rows, cols) of patches."""
        import torch

        p = self.encoder_patch_size
        mean = torch.tensor(self.image_mean).view(3, 1, 1)
        std = torch.tensor(self.image_std).view(3, 1, 1)
        x = (tile / 255.0 - mean) / std
        gh, gw = x.shape[1] // p, x.shape[2] // p
        x = x.reshape(3, gh, p, gw, p).permute(1, 3, 2, 4, 0).reshape(gh * gw, p * p * 3)
        most = self.max_num_patches
        if gh * gw > most:
            # a very long thin image: the 32 px floor on its short side leaves more patches than any tile holds;
            # transformers' processor skips padding it (pad_along_first_dim), so a thumbnail cannot stack with its
            # tiles and a lone view's patches outnumber its mask (read, not run: torchvision): refused here by name
            raise ValueError(f"an image resized to {tile.shape[1]}x{tile.shape[2]} px is {gh * gw} patches, over the "
                             f"{most} a tile holds (max_image_tokens={self.max_image_tokens}): its aspect ratio is "
                             f"too extreme for this processor; crop or pad the image nearer to square")
        mask = torch.zeros(most, dtype=torch.int32)
        mask[: gh * gw] = 1
        return torch.cat([x, x.new_zeros((most - gh * gw, x.shape[1]))]), mask, [gh, gw]

    def _one(self, image):
        import torch

        arr = np.asarray(image.convert("RGB")) if hasattr(image, "convert") else np.asarray(image)
        if arr.ndim == 2:
            arr = np.repeat(arr[..., None], 3, axis=-1)
        x = torch.from_numpy(np.array(arr, dtype=np.uint8)).permute(2, 0, 1)  # (3, H, W) uint8
        height, width = int(x.shape[1]), int(x.shape[2])
        rows, cols, size = self.layout(height, width)
        if rows * cols == 1:
            tiles = [self._resize(x, *size)]
        else:
            t = self.tile_size
            big = self._resize(x, rows * t, cols * t)
            tiles = [big[:, r * t:(r + 1) * t, c * t:(c + 1) * t] for r in range(rows) for c in range(cols)]
            if self.use_thumbnail:
                tiles.append(self._resize(x, *size))
        return [self._patches(tile) for tile in tiles], rows, cols, size

    def preprocess(self, images, return_tensors=None, **kwargs) -> BatchFeature:
        import torch

        unknown = sorted(set(kwargs) - {"return_row_col_info", "do_convert_rgb", "input_data_format"})
        if unknown:
            raise TypeError(f"Lfm2VlImageProcessorTorch does not take {unknown}: set them on the processor instead")
        if not isinstance(images, (list, tuple)):
            images = [images]
        flat = [im for item in images for im in (item if isinstance(item, (list, tuple)) else [item])]
        done = [self._one(im) for im in flat]
        tiles = [t for d in done for t in d[0]]
        data = {"pixel_values": torch.stack([t[0] for t in tiles]),
                "pixel_attention_mask": torch.stack([t[1] for t in tiles]),
                "spatial_shapes": torch.tensor([t[2] for t in tiles], dtype=torch.long),
                "image_rows": [d[1] for d in done], "image_cols": [d[2] for d in done],
                "image_sizes": [d[3] for d in done]}
        return BatchFeature(data=data, tensor_type=return_tensors)
