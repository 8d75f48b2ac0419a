"""Grounding boxes the doctor cannot place (data/boxes.py, MM273): found by the fuzzer of users' data
(tests/data/fuzz_objectives.py), each counted as a finding instead of stopping the data scan."""

import json

from PIL import Image

from tests.doctor.doctor_helpers import context_for, run_codes

HUGE = "9" * 400  # past float's range: float() reads it as inf


def _mm273(tmp_path, tiny, answer):
    tmp_path.mkdir()
    img = tmp_path / "img.png"
    Image.new("RGB", (64, 48), (200, 120, 40)).save(img)
    rec = {"messages": [{"role": "user", "content": [{"type": "image", "path": str(img)}, {"type": "text", "text": "Where?"}]},
                        {"role": "assistant", "content": answer}]}
    data = tmp_path / "ground.jsonl"
    data.write_text(json.dumps(rec) + "\n")
    ctx = context_for(tmp_path, {"model": {"name": tiny}, "data": {"train": str(data), "max_length": 4096}})
    return run_codes(ctx, "MM273").findings


def test_a_box_coordinate_past_floats_range_is_a_box_outside_the_image(tmp_path):
    """`(-999...9,-1),(-1,-1)` (400 digits) made int(-inf) raise OverflowError in the doctor's data scan; now the
    box is tallied as outside the image in any space, on the grid (Qwen2-VL) and in pixels (Qwen2.5-VL)."""
    grid = _mm273(tmp_path / "grid", "tiny/qwen2-vl", f"<|box_start|>(-{HUGE},-1),(-1,-1)<|box_end|>")
    pixels = _mm273(tmp_path / "px", "tiny/qwen2.5-vl", f'[{{"bbox_2d": [-{HUGE}, -1, -1, -1], "label": "cat"}}]')
    for found in (grid, pixels):
        assert [f.code for f in found] == ["MM273"], [(f.code, f.message[:300]) for f in found]
        assert "outside the image in any space" in found[0].message
