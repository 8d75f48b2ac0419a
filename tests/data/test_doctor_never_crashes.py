"""doctor exits 0 or 1 — findings, never an internal error (MM099) — on records of every modality,
including the shapes that crashed its old token arithmetic: LLaVA records, 40 s audio, 300:1 images,
an over-large image, and a video without an audio track asked for its audio."""

from __future__ import annotations

import pytest

from .conftest import jsonl, write_mp4, write_png, write_wav

DATA_CODES = ["MM014", "MM016", "MM017", "MM018", "MM002", "MM033", "MM031", "MM030"]


@pytest.fixture
def doctor(tmp_path):
    import yaml

    from mmtune.doctor.runner import run_doctor

    def run(tree, *codes):
        path = tmp_path / "cfg.yaml"
        path.write_text(yaml.safe_dump({"output_dir": str(tmp_path / "run"), **tree}))
        return run_doctor(path, [], None, only=list(codes))

    return run


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    d = tmp_path_factory.mktemp("crash")
    return {"wide": write_png(d / "wide.png", size=(3000, 10)), "huge": write_png(d / "huge.png", size=(4000, 3000)),
            "small": write_png(d / "small.png", size=(64, 48)),
            "long": write_wav(d / "long.wav", seconds=40.0, sr=16000),
            "silent": write_mp4(d / "silent.mp4", n_frames=12, fps=4, size=(64, 48)), "dir": d}


def _row(parts, answer="two"):
    return {"messages": [{"role": "user", "content": parts + [{"type": "text", "text": "What is it?"}]},
                         {"role": "assistant", "content": answer}]}


CASES = {
    "tiny/llava": lambda m: [_row([{"type": "image", "path": str(m["small"])}]),
                             _row([{"type": "image", "path": str(m["huge"])}])],
    "tiny/llava-next": lambda m: [_row([{"type": "image", "path": str(m["wide"])}])],
    "tiny/qwen2-vl": lambda m: [_row([{"type": "image", "path": str(m["wide"])}]),
                                _row([{"type": "image", "path": str(m["huge"])}]),
                                _row([{"type": "video", "path": str(m["silent"])}])],
    "tiny/qwen2-audio": lambda m: [_row([{"type": "audio", "path": str(m["long"])}])],
    "tiny/qwen2.5-omni": lambda m: [_row([{"type": "video", "path": str(m["silent"]), "use_audio": True}]),
                                    _row([{"type": "audio", "path": str(m["long"])}])],
}


@pytest.mark.parametrize("model", sorted(CASES))
@pytest.mark.parametrize("policy", ["error", "skip"])
def test_doctor_reports_findings_not_crashes(doctor, media, model, policy):
    path = jsonl(media["dir"] / f"{model.replace('/', '_')}.jsonl", CASES[model](media))
    tree = {"model": {"name": model, "video_frames": 4}, "data": {"train": str(path), "on_bad_record": policy,
                                                                  "max_length": 4096}}
    rep = doctor(tree, *DATA_CODES)
    assert "MM099" not in rep.codes() and "MM098" not in rep.codes(), [f.message for f in rep.findings]
    refused = model not in ("tiny/llava", "tiny/llava-next")  # LLaVA resizes any image to its fixed crop
    if policy == "error" and refused:
        assert rep.errors, "the case holds a record training would refuse"
    else:
        assert not [f for f in rep.errors if f.code != "MM031"], [f.message for f in rep.errors]
