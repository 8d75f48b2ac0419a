"""Phi-4-multimodal's image processor on torch alone (no torchvision), for machines without torchvision.

transformers' `Phi4MultimodalImageProcessor` (image_processing_phi4_multimodal.py, 5.24) is a
`TorchvisionBackend` and imports torchvision at module level, and it has no PIL twin. This is the same
algorithm, step for step, on the tensor ops torchvision itself calls for tensors
(`torch.nn.functional.interpolate`, a constant pad): an image is resized (bilinear, antialiased) and
padded with white onto a grid of `size` x `size` crops ("dynamic HD", at most `dynamic_hd` crops), normalised,
and preceded by a global view resized (bicubic) to one crop; `image_attention_mask` marks the patches that
are not padding. Output keys as the original: `image_pixel_values`, `image_sizes`, `image_attention_mask`,
`num_img_tokens`.

One deliberate difference: transformers writes the token count as `256 + 1 + ... + 16`, the figures of the
real 448 px / 14 px geometry; here they are computed from `size` and `patch_size` ((mask/2)^2 global tokens
and mask/2 row separators, mask = size / patch_size), equal at 448 / 14 and right for the tiny twin's crops.
Where torchvision is installed, a saved model folder loads transformers' own processor instead
(models/processor_loading.py).
"""

from __future__ import annotations

import math

import numpy as np
from transformers.image_processing_utils import BaseImageProcessor, BatchFeature


class Phi4MMImageProcessorTorch(BaseImageProcessor):
    model_input_names = ["image_pixel_values", "image_sizes", "image_attention_mask"]

    def __init__(self, size: dict | None = None, patch_size: int = 14, dynamic_hd: int = 36,
                 image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5), **kwargs):
        super().__init__(**kwargs)
        self.size = dict(size or {"height": 448, "width": 448})
        self.patch_size = patch_size
        self.dynamic_hd = dynamic_hd
        self.image_mean = list(image_mean)
        self.image_std = list(image_std)

    @property
    def crop(self) -> int:
        if self.size["height"] != self.size["width"]:
            raise ValueError("Phi-4-multimodal's image processor only supports square crops")
        return int(self.size["height"])

    # ---------------------------------------------------------------- the crop grid (transformers' arithmetic)
    @staticmethod
    def _closest_ratio(aspect, ratios, width, height, crop):
        best, best_diff, area = (1, 1), float("inf"), width * height
        for r in ratios:
            diff = abs(aspect - r[0] / r[1])
            if diff < best_diff:
                best_diff, best = diff, r
            elif diff == best_diff and area > 0.5 * crop * crop * r[0] * r[1]:
                best = r
        return best

    def grid(self, height: int, width: int, max_num: int | None = None):
        """(cols, rows, new_w, new_h, pad_w, pad_h): where an image of this pixel size lands on the crop grid."""
        crop, max_num = self.crop, max_num or self.dynamic_hd
        w_num, h_num = math.ceil(width / crop), math.ceil(height / crop)
        if w_num * h_num > max_num:
            ratios = sorted({(i, j) for n in range(1, max_num + 1) for i in range(1, n + 1) for j in range(1, n + 1)
                             if 1 <= i * j <= max_num}, key=lambda x: x[0] * x[1])
            cols, rows = self._closest_ratio(width / height, ratios, width, height, crop)
        else:
            cols, rows = w_num, h_num
        tw, th = crop * cols, crop * rows
        if tw / width < th / height:
            new_w, new_h = tw, int(height * (tw / width))
        else:
            new_w, new_h = int(width * (th / height)), th
        if min(new_h, th) < 10 or min(new_w, tw) < 10:
            raise ValueError(f"the aspect ratio is very extreme {(new_w, new_h)}")
        return cols, rows, new_w, new_h, tw - new_w, th - new_h

    def _mask(self, cols, rows, pad_w, pad_h):
        import torch

        m = self.crop // self.patch_size
        mask = torch.ones((m * rows, m * cols))
        if pad_w >= self.patch_size:
            mask[:, -math.floor(pad_w / self.patch_size):] = 0
        if pad_h >= self.patch_size:
            mask[-math.floor(pad_h / self.patch_size):, :] = 0
        return mask

    def num_tokens(self, height: int, width: int) -> int:
        """Image tokens for an image of this pixel size, from the grid and its padding mask alone."""
        cols, rows, _, _, pad_w, pad_h = self.grid(height, width)
        return self._tokens(self._mask(cols, rows, pad_w, pad_h), cols, rows)

    def _tokens(self, mask, cols, rows) -> int:
        m = self.crop // self.patch_size
        half = m // 2 + m % 2
        down = (mask.reshape(rows, m, cols, m).transpose(1, 2).reshape(-1, m, m)[:, 0::2, 0::2]
                .reshape(rows, cols, half, half).transpose(1, 2).reshape(rows * half, cols * half))
        return half * half + 1 + int(down.sum().item()) + int(down[:, 0].sum().item()) + half

    # ---------------------------------------------------------------- pixels
    def _one(self, image):
        import torch
        import torch.nn.functional as F

        arr = np.asarray(image.convert("RGB")) if hasattr(image, "convert") else np.asarray(image)
        if arr.ndim == 2:
            arr = np.repeat(arr[..., None], 3, axis=-1)
        x = torch.from_numpy(np.array(arr, dtype=np.uint8)).permute(2, 0, 1)  # (3, H, W) uint8
        height, width = x.shape[-2:]
        cols, rows, new_w, new_h, pad_w, pad_h = self.grid(int(height), int(width))
        mask = self._mask(cols, rows, pad_w, pad_h)
        # torchvision's tensor resize of a uint8 image: antialiased bilinear, rounded back to uint8
        x = F.interpolate(x[None].float(), size=(new_h, new_w), mode="bilinear", antialias=True, align_corners=False)
        x = x.round().clamp(0, 255)[0]
        x = F.pad(x, (0, pad_w, 0, pad_h), value=255.0)
        mean = torch.tensor(self.image_mean).view(3, 1, 1)
        std = torch.tensor(self.image_std).view(3, 1, 1)
        x = (x / 255.0 - mean) / std
        crop, m = self.crop, self.crop // self.patch_size
        glob = F.interpolate(x[None], size=(crop, crop), mode="bicubic", antialias=False, align_corners=False)
        tiles = x.reshape(3, rows, crop, cols, crop).permute(1, 3, 0, 2, 4).reshape(-1, 3, crop, crop)
        tile_masks = mask.reshape(rows, m, cols, m).transpose(1, 2).reshape(-1, m, m)
        pixels = torch.cat([glob, tiles], dim=0)
        masks = torch.cat([torch.ones((1, m, m)), tile_masks], dim=0)
        return pixels, masks, self._tokens(mask, cols, rows), [rows * crop, cols * crop]

    def preprocess(self, images, return_tensors=None, **kwargs) -> BatchFeature:
        import torch

        if not isinstance(images, (list, tuple)):
            images = [images]
        flat = [im for item in images for im in (item if isinstance(item, (list, tuple)) else [item])]
        done = [self._one(im) for im in flat]
        most = max(p.shape[0] for p, *_ in done)
        # padding crops: zero pixels, mask ones (as transformers pads them)
        pixels = torch.stack([torch.cat([p, p.new_zeros((most - p.shape[0], *p.shape[1:]))]) for p, *_ in done])
        masks = torch.stack([torch.cat([k, k.new_ones((most - k.shape[0], *k.shape[1:]))]) for _, k, *_ in done])
        data = {"image_pixel_values": pixels, "image_sizes": torch.tensor([d[3] for d in done], dtype=torch.long),
                "image_attention_mask": masks, "num_img_tokens": [d[2] for d in done]}
        return BatchFeature(data=data, tensor_type=return_tensors)
