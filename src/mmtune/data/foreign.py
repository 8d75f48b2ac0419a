"""Marks other tools write into a record that mmtune would otherwise read as something else, read as they mean
it or refused with the reason (data/variants.py has the layouts; this module the keys inside them):

- a turn's own training switch: ms-swift's `"loss": false`, axolotl's `"weight": 0` and `"training": false`
  (mistral-finetune's `weight` too) on an assistant message. Ignored, that answer was trained although the
  data said not to (a weak answer kept as context, a tool call). The record keeps the turn with
  `"train": False`; the encoder renders it and leaves its tokens out of the labels (`records.trained_only`).
  `loss: true` on a user / system turn asks for training on text mmtune never trains: refused.
- qwen_vl_utils' per-item sizes in a media part (`resized_height`, `min_pixels`, `fps`, `nframes`, ...):
  mmtune sizes media by `model.max_pixels` / `model.min_pixels` / `model.video_frames` / `model.video_fps`
  for every record, so the part's own size was dropped and the item trained at another size: refused.
- Qwen-VL's (v1) `<img>path</img>` in the text: no image was attached, the path was trained as text: refused.
"""

from __future__ import annotations

import re

from .formats import BadRecord

# key -> the value that means "do not train this turn", per tool
_SWITCHES = {"loss": "ms-swift", "weight": "axolotl / mistral-finetune", "training": "axolotl"}
# qwen_vl_utils' per-item keys (fetch_image / fetch_video): sizes, frame counts, clip bounds
SIZING_KEYS = ("resized_height", "resized_width", "min_pixels", "max_pixels", "total_pixels", "fps", "nframes",
               "min_frames", "max_frames", "video_start", "video_end")
_QWEN_VL_IMG = re.compile(r"<img>\s*([^<>\n]{1,500}?)\s*</img>")


def turn_trained(m: dict, i: int, role: str, where: str) -> bool:
    """Whether message `i` (a dict as written, `role` already mapped) asks to be trained; True when it says
    nothing. Only assistant turns are trained, so a switch that turns another role on is refused."""
    trained = True
    for key, tool in _SWITCHES.items():
        v = m.get(key)
        if v is None:
            continue
        if key == "weight":
            if isinstance(v, bool) or v not in (0, 1):
                raise BadRecord("bad type", f"message {i}'s weight is {v!r}; {tool} reads 0 (not trained) or 1", where,
                                "give weight 0 or 1, or drop it (assistant turns are trained)")
            on = v == 1
        elif isinstance(v, bool):
            on = v
        else:
            raise BadRecord("bad type", f"message {i}'s {key!r} is {v!r}, not true / false ({tool}'s switch)", where,
                            f'write "{key}": false to leave the turn out of the loss, or drop the key')
        if on and role != "assistant":
            raise BadRecord("bad conversation", f"message {i} ({role}) asks to be trained ({key}={v!r}); mmtune trains "
                            "assistant turns only", where, f"drop {key!r} from the {role} turn, or make the text an "
                            "assistant turn")
        trained = trained and on
    return trained


def check_part(p: dict, i: int, where: str) -> None:
    """A media part with qwen_vl_utils' per-item sizes is refused (they would be dropped)."""
    asked = [k for k in SIZING_KEYS if p.get(k) is not None]
    if asked:
        shown = ", ".join(f"{k}={p[k]!r}" for k in asked)
        raise BadRecord("bad media", f"message {i}'s {p.get('type')} part asks for its own size ({shown}); mmtune "
                        "sizes every item by the run's settings, so it would be trained at another size", where,
                        "set model.max_pixels / model.min_pixels (images) or model.video_frames / model.video_fps "
                        "(videos) for the run, resize the files themselves, or drop these keys")


def check_text(text: str, i: int, where: str) -> None:
    """Qwen-VL's `<img>path</img>` is refused: the image would not be attached and its path trained as text."""
    found = _QWEN_VL_IMG.search(text)
    if found:
        raise BadRecord("placeholder mismatch", f"message {i} holds Qwen-VL's <img>{found.group(1)[:80]}</img>: mmtune "
                        "attaches no image from it (the path would be trained as text)", where,
                        'write <image> where the image goes and list the file in "images": ["'
                        + found.group(1)[:80] + '"] (one per <image>)')
