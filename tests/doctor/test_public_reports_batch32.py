"""Public bug reports, batch 32: grounding boxes and their coordinate spaces (docs/doctor.md, batch 32).

Qwen2-VL and Qwen3-VL read a box on a 0-1000 grid of the image; Qwen2.5-VL in pixels of the image its processor
made (smart_resize inside the pixel caps). The records here are written the ways the threads wrote them, on images
of odd sizes, and run through the doctor's data scan on the tiny twins.
"""

import json

from PIL import Image

from tests.doctor.doctor_helpers import context_for, run_codes

SIZES = [(613, 437), (1500, 371), (97, 1203)]  # (width, height): wide, tall, and one the caps shrink a lot


def _records(tmp_path, boxes_for, form="json", sizes=SIZES):
    """A messages file: one image per record, the answer holding the box `boxes_for(w, h)` gives."""
    lines = []
    for i, (w, h) in enumerate(sizes):
        img = tmp_path / f"img{i}.png"
        Image.new("RGB", (w, h), (200, 120, 40)).save(img)
        x1, y1, x2, y2 = boxes_for(w, h)
        box = (f'[{{"bbox_2d": [{x1}, {y1}, {x2}, {y2}], "label": "cat"}}]' if form == "json"
               else f"<|object_ref_start|>cat<|object_ref_end|><|box_start|>({x1},{y1}),({x2},{y2})<|box_end|>")
        lines.append({"messages": [
            {"role": "user", "content": [{"type": "image", "path": str(img)}, {"type": "text", "text": "Locate the cat."}]},
            {"role": "assistant", "content": box}]})
    path = tmp_path / "ground.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return str(path)


def _mm273(tmp_path, tiny, data, **model):
    tmp_path.mkdir(exist_ok=True)
    ctx = context_for(tmp_path, {"model": {"name": tiny, **model}, "data": {"train": data, "max_length": 4096}})
    return [f for f in run_codes(ctx, "MM273").findings if f.code == "MM273"]


def _lower_right(w, h):  # an object in the lower right quarter, in the file's pixels (COCO-style annotations)
    return round(w * 0.6), round(h * 0.6), w - 1, h - 1


def _resized(tiny, **model):
    """(w, h) -> the box above in pixels of the image the run's processor makes (QwenLM/Qwen3-VL#721's recipe)."""
    from mmtune.compat.processors import resized_image_size
    from mmtune.models.tiny import tiny_config_and_processor

    _, proc = tiny_config_and_processor(tiny)
    if model:
        proc.image_processor.size = {"shortest_edge": model.get("min_pixels", 56 * 56), "longest_edge": model["max_pixels"]}

    def box(w, h):
        rh, rw = resized_image_size(proc, h, w)
        return tuple(round(v * s) for v, s in zip(_lower_right(w, h), (rw / w, rh / h, rw / w, rh / h)))
    return box


# https://github.com/QwenLM/Qwen3-VL/issues/721, https://github.com/QwenLM/Qwen3-VL/issues/957,
# https://github.com/2U1/Qwen-VL-Series-Finetune/issues/77, https://github.com/QwenLM/Qwen3-VL/issues/1161,
# https://github.com/modelscope/ms-swift/issues/3659: Qwen2.5-VL fine-tuned on boxes in the original image's pixels;
# the processor shrinks the image, and the trained model's boxes are offset (mAP 0) with no error anywhere.
def test_qwen25vl_boxes_in_the_files_pixels_are_found(tmp_path):
    found = _mm273(tmp_path, "tiny/qwen2.5-vl", _records(tmp_path, _lower_right))
    assert len(found) == 1 and found[0].severity == "warning"
    msg = found[0].message
    assert "3 of 3 grounding box(es)" in msg and "the file's pixels" in msg
    assert "after the processor's resize" in msg and "resized" in found[0].fix


def test_qwen25vl_boxes_in_resized_pixels_pass(tmp_path):
    assert _mm273(tmp_path, "tiny/qwen2.5-vl", _records(tmp_path, _resized("tiny/qwen2.5-vl"))) == []


# https://github.com/2U1/Qwen-VL-Series-Finetune/issues/77 (image_max_pixels set differently in training and testing),
# https://github.com/modelscope/ms-swift/issues/4027, https://github.com/QwenLM/Qwen3-VL/issues/1311: Qwen2.5-VL boxes
# computed for one max_pixels, trained at another.
def test_qwen25vl_boxes_computed_for_another_max_pixels_are_found(tmp_path):
    data = _records(tmp_path, _resized("tiny/qwen2.5-vl", max_pixels=200_704))
    assert _mm273(tmp_path / "a", "tiny/qwen2.5-vl", data, max_pixels=200_704) == []
    found = _mm273(tmp_path / "b", "tiny/qwen2.5-vl", data, max_pixels=50_176)
    assert len(found) == 1 and "after the processor's resize" in found[0].message


# https://github.com/QwenLM/Qwen3-VL/issues/663, https://github.com/modelscope/ms-swift/issues/2235,
# https://github.com/QwenLM/Qwen3-VL/issues/866: Qwen2-VL's <|box_start|>(x1,y1),(x2,y2)<|box_end|> takes the 0-1000
# grid; boxes written in pixels.
def test_qwen2vl_boxes_in_pixels_are_found_and_the_grid_passes(tmp_path):
    found = _mm273(tmp_path / "a", "tiny/qwen2-vl", _records(tmp_path, _lower_right, form="tokens"))
    assert len(found) == 1 and "past 1000" in found[0].message and "0-1000 grid" in found[0].fix
    grid = _records(tmp_path, lambda w, h: (600, 600, 999, 999), form="tokens")
    assert _mm273(tmp_path / "b", "tiny/qwen2-vl", grid) == []


# https://github.com/QwenLM/Qwen3-VL/issues/1623, https://github.com/QwenLM/Qwen3-VL/issues/1486,
# https://github.com/QwenLM/Qwen3-VL/issues/1987, https://github.com/modelscope/ms-swift/issues/6410: Qwen3-VL went back
# to the 0-1000 grid; Qwen2.5-VL data (pixels) reused, or boxes as 0-1 fractions
# (https://github.com/2U1/Qwen-VL-Series-Finetune/issues/95 asks whether to normalise).
def test_qwen3vl_pixels_and_fractions_are_found(tmp_path):
    found = _mm273(tmp_path / "a", "tiny/qwen3-vl", _records(tmp_path, _lower_right))
    assert len(found) == 1 and "past 1000" in found[0].message
    fractions = _records(tmp_path, lambda w, h: (0.6, 0.6, 0.99, 0.99))
    found = _mm273(tmp_path / "b", "tiny/qwen3-vl", fractions)
    assert len(found) == 1 and "0-1 fractions" in found[0].message


# https://github.com/QwenLM/Qwen3-VL/issues/1397 (the cookbook's comment says [y1, x1, y2, x2], its code [x1, y1, x2, y2]):
# boxes written in the other order come out with x2 < x1 for wide objects.
def test_boxes_with_swapped_corners_are_found(tmp_path):
    found = _mm273(tmp_path, "tiny/qwen2-vl", _records(tmp_path, lambda w, h: (700, 100, 300, 900)))
    assert len(found) == 1 and "x2 < x1" in found[0].message and found[0].fix.startswith("x1 <= x2")


# https://github.com/QwenLM/Qwen3-VL/issues/2020, https://github.com/QwenLM/Qwen3-VL/issues/1871,
# https://github.com/modelscope/ms-swift/issues/3407: grounding scored after converting boxes from the model's space to
# the file's pixels, by hand, each thread with its own conversion (and its own mistakes). mmtune had no box metric
# (eval.metrics=[box_iou] was an unknown metric); now IoU is computed in the space prediction and reference share.
def test_box_metrics_score_in_the_space_the_answers_are_written_in():
    from mmtune.evaluate.metrics import compute

    ref = '[{"bbox_2d": [100, 100, 300, 300], "label": "cat"}]'
    same = '[{"bbox_2d": [100, 100, 300, 300], "label": "cat"}]'
    half = "<|box_start|>(200,100),(400,300)<|box_end|>"  # IoU 1/3 with ref
    out = compute(["box_iou", "box_acc50"], [same, half, "a cat"], [[ref], [ref], [ref]])
    assert abs(out["box_iou"] - (1 + 1 / 3 + 0) / 3) < 1e-9 and abs(out["box_acc50"] - 1 / 3) < 1e-9
    # IoU does not move when x and y are scaled apart: the 0-1000 grid of a 613x437 image and its pixels agree.
    grid = [[100, 200, 500, 600], [300, 300, 700, 900]]
    px = [[round(x * 613 / 1000, 6), round(y * 437 / 1000, 6), round(x2 * 613 / 1000, 6), round(y2 * 437 / 1000, 6)]
          for x, y, x2, y2 in grid]
    def as_json(b):
        return f'{{"bbox_2d": {b}}}'
    g = compute(["box_iou"], [as_json(grid[0])], [[as_json(grid[1])]])["box_iou"]
    p = compute(["box_iou"], [as_json(px[0])], [[as_json(px[1])]])["box_iou"]
    assert 0 < g < 1 and abs(g - p) < 1e-6
