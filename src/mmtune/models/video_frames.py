"""A Qwen-style video processor that needs only PIL and numpy.

transformers' own video processors require torchvision, which has no CPU wheel matched to every
torch build. Real runs on a GPU machine use the model's own video processor (loaded with the model);
tiny models on CPU use this one, which follows the same patch layout as Qwen2-VL's video processor:
frames resized by `smart_resize`, normalised, grouped by `temporal_patch_size`, cut into
`patch_size` patches ordered by `merge_size` windows. Output keys: `pixel_values_videos`,
`video_grid_thw`. A processor holding it is built with `mmtune.compat.transformers_internals.make_processor`
(transformers' processor class check cannot name a video processor class without torchvision).
"""

from __future__ import annotations

import numpy as np
from transformers.video_processing_utils import BaseVideoProcessor

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


class FramesVideoProcessor(BaseVideoProcessor):
    model_input_names = ["pixel_values_videos", "video_grid_thw"]

    def __init__(self, patch_size: int = 14, temporal_patch_size: int = 2, merge_size: int = 2,
                 min_pixels: int = 56 * 56, max_pixels: int = 112 * 112,
                 image_mean=OPENAI_CLIP_MEAN, image_std=OPENAI_CLIP_STD, **kwargs):
        # BaseVideoProcessor.__init__ wires torchvision transforms; none are needed here.
        self.patch_size = patch_size
        self.temporal_patch_size = temporal_patch_size
        self.merge_size = merge_size
        self.min_pixels = min_pixels
        self.max_pixels = max_pixels
        self.size = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
        self.image_mean = list(image_mean)
        self.image_std = list(image_std)

    def _frames_to_array(self, video) -> np.ndarray:
        """A video as (T, H, W, 3) uint8: accepts a list of PIL images or arrays, or an array."""
        if isinstance(video, np.ndarray):
            arr = video
        else:
            arr = np.stack([np.asarray(f.convert("RGB")) if hasattr(f, "convert") else np.asarray(f)
                            for f in video])
        if arr.ndim != 4 or arr.shape[-1] != 3:
            raise ValueError(f"a video must be frames of shape (T, H, W, 3); got {arr.shape}")
        return arr

    def get_num_of_video_patches(self, num_frames: int, height: int, width: int, videos_kwargs=None) -> int:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

        factor = self.patch_size * self.merge_size
        h, w = smart_resize(height, width, factor=factor, min_pixels=self.min_pixels, max_pixels=self.max_pixels)
        t = -(-num_frames // self.temporal_patch_size)
        return t * (h // self.patch_size) * (w // self.patch_size)

    # transformers 5.17's Qwen processors ask for this name, 5.23's for the one above: both answer.
    get_number_of_video_patches = get_num_of_video_patches

    # Frames arrive already sampled; their rate is unknown unless the caller says. Qwen's own
    # processors sample at 2 fps by default, so that is the assumed rate for timestamps
    # (Qwen2.5-VL's second_per_grid_ts, Qwen3-VL's "<t seconds>" prompts).
    default_fps = 2.0

    def __call__(self, videos=None, return_tensors=None, return_metadata=False, video_metadata=None,
                 fps=None, **kwargs):
        import torch
        from PIL import Image
        from transformers import BatchFeature
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

        if videos is None:
            return BatchFeature({})
        if not isinstance(videos, (list, tuple)) or (videos and hasattr(videos[0], "convert")):
            videos = [videos]
        ps, tps, ms = self.patch_size, self.temporal_patch_size, self.merge_size
        mean = np.array(self.image_mean, dtype=np.float32)
        std = np.array(self.image_std, dtype=np.float32)
        all_patches, grids, sizes = [], [], []
        for video in videos:
            arr = self._frames_to_array(video)
            t, h0, w0, _ = arr.shape
            sizes.append((t, (h0, w0)))
            h, w = smart_resize(h0, w0, factor=ps * ms, min_pixels=self.min_pixels, max_pixels=self.max_pixels)
            frames = np.stack([np.asarray(Image.fromarray(f).resize((w, h), Image.BICUBIC)) for f in arr])
            x = (frames.astype(np.float32) / 255.0 - mean) / std  # (T, H, W, C)
            x = x.transpose(0, 3, 1, 2)  # (T, C, H, W)
            if t % tps:
                x = np.concatenate([x, np.repeat(x[-1:], tps - t % tps, axis=0)])
            gt, gh, gw = x.shape[0] // tps, h // ps, w // ps
            x = x.reshape(gt, tps, 3, gh // ms, ms, ps, gw // ms, ms, ps)
            x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
            all_patches.append(x.reshape(gt * gh * gw, 3 * tps * ps * ps))
            grids.append([gt, gh, gw])
        data = {
            "pixel_values_videos": torch.from_numpy(np.concatenate(all_patches)),
            "video_grid_thw": torch.tensor(grids, dtype=torch.long),
        }
        if return_metadata:
            from transformers.video_utils import VideoMetadata

            if video_metadata is None:
                video_metadata = [VideoMetadata(total_num_frames=n, fps=fps or self.default_fps,
                                                frames_indices=list(range(n)), height=hw[0], width=hw[1])
                                  for n, hw in sizes]
            for m in video_metadata:  # a clip given without its rate (a frames folder): the assumed one
                if m.fps is None:
                    m.fps = self.default_fps
            data["video_metadata"] = video_metadata
        return BatchFeature(data, tensor_type=None)
