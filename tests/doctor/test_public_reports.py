"""Broken setups taken from public bug reports, each in mmtune terms: the doctor flags it (error where the
run certainly fails, warning where it may) with a fix, and stays silent on the clean twin beside it.

Every test names its thread; docs/doctor.md ("Public bug reports covered") maps report -> check -> test.
"""

from __future__ import annotations

import json

import pytest
from doctor_helpers import TINY_VL, model_folder

AUDIO_CODES = ("MM014", "MM017", "MM018", "MM082")


def _msg(question: str, answer: str = "3"):
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _wav(path, seconds: float, sr: int = 16000):
    import numpy as np
    import soundfile as sf

    sf.write(path, (np.random.RandomState(0).randn(int(seconds * sr)) * 0.05).astype("float32"), sr)
    return path.name


def _codes(rep, severity):
    return {f.code for f in rep.findings if f.severity == severity}


# --------------------------------------------------------------------------------------------- audio window
# https://github.com/QwenLM/Qwen2-Audio/issues/57 ("Clips longer than 1 minute cannot be recognized in full";
# answer: "longest 30s"), https://github.com/vllm-project/vllm/pull/9248 (maintainer: "Qwen2audio only
# supports audio lengths of up to 30 seconds"; a minutes-long clip gave a fixed token count).

@pytest.fixture
def audio_data(tmp_path):
    def write(seconds: float):
        name = _wav(tmp_path / f"clip{seconds:g}.wav", seconds)
        return _jsonl(tmp_path / f"audio{seconds:g}.jsonl",
                      [{"messages": _msg("<audio>What was said?", "hello"), "audios": [name]}] * 2)

    return write


def test_qwen2_audio_clip_past_the_30s_window_is_an_error(doctor, audio_data):
    """Qwen2-Audio-7B LoRA on 40 s clips with the cap raised to 60 s: the processor keeps 30 s of each."""
    rep = doctor({"model": {"name": "tiny/qwen2-audio", "audio_max_seconds": 60},
                  "data": {"train": audio_data(40), "format": "messages"}}, *AUDIO_CODES)
    found = [f for f in rep.errors if f.code == "MM082"]
    assert found, rep.findings
    assert "2 audio clip(s)" in found[0].message and "40.0 s" in found[0].message
    assert found[0].fix.startswith("model.audio_max_seconds=30")
    # The length the scan reports is the encoder's: the 40 s clip counts as the 30 s the encoder sees.
    assert max(rep.tables["data"].splits[0].lengths) < 800


def test_qwen2_audio_clean_twins_are_silent_on_the_window(doctor, audio_data):
    # 5 s clips with the default cap: nothing to say.
    rep = doctor({"model": {"name": "tiny/qwen2-audio"}, "data": {"train": audio_data(5), "format": "messages"}},
                 *AUDIO_CODES)
    assert "MM082" not in rep.codes() and rep.errors == []
    # 40 s clips with the default 30 s cap are refused ("too long", MM017), never cut: MM082 stays silent.
    rep = doctor({"model": {"name": "tiny/qwen2-audio"}, "data": {"train": audio_data(40), "format": "messages"}},
                 *AUDIO_CODES)
    assert "MM082" not in rep.codes() and "MM017" in _codes(rep, "error")


def test_omni_audio_cap_above_the_window_is_a_fast_warning(doctor, audio_data):
    """https://github.com/modelscope/ms-swift/issues/9113: training Qwen3-Omni truncated every long clip to
    30 s (audio tokens fixed at 390). Qwen2.5-Omni's extractor has the same 30 s window: a cap above it is a
    warning in the fast subset `mmtune train` runs first (no data read); data within the window stays clean."""
    tree = {"model": {"name": "tiny/qwen2.5-omni", "audio_max_seconds": 120},
            "data": {"train": audio_data(5), "format": "messages"}}
    rep = doctor(tree, "MM082", fast=True)
    assert [f.severity for f in rep.findings] == ["warning"], rep.findings
    assert "30 s window" in rep.findings[0].message and rep.findings[0].where == "model.audio_max_seconds"
    rep = doctor({**tree, "model": {"name": "tiny/qwen2.5-omni"}}, "MM082", fast=True)
    assert rep.findings == []


def _mp4_with_audio(path, seconds: float, sr: int = 16000):
    """A small MPEG-4 clip (grey frames at 2 fps) with a mono AAC track of `seconds`."""
    import av
    import numpy as np

    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=2)
        vs.width, vs.height, vs.pix_fmt = 64, 48, "yuv420p"
        aus = out.add_stream("aac", rate=sr)
        aus.layout = "mono"
        for i in range(int(seconds * 2)):
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 10 * (i % 20), dtype=np.uint8), format="rgb24")
            out.mux(vs.encode(frame))
        out.mux(vs.encode(None))
        wave = (0.3 * np.sin(2 * np.pi * 440 * np.arange(int(seconds * sr)) / sr)).astype(np.float32)
        step = aus.codec_context.frame_size or 1024
        for i in range(0, len(wave), step):
            frame = av.AudioFrame.from_ndarray(wave[None, i:i + step], format="fltp", layout="mono")
            frame.sample_rate, frame.pts = sr, i
            out.mux(aus.encode(frame))
        out.mux(aus.encode(None))
    return path.name


def test_omni_video_sound_track_past_the_window_is_an_error(doctor, tmp_path):
    """The same report's case for a video whose own sound is heard (use_audio, Qwen2.5-Omni): a 40 s track
    under a 60 s cap is cut to 30 s: MM082 counts it with the record; within the default cap it is refused
    (MM017 "too long") and MM082 is silent."""
    name = _mp4_with_audio(tmp_path / "talk.mp4", 40)
    row = {"messages": [{"role": "user", "content": [{"type": "video", "path": name, "use_audio": True},
                                                     {"type": "text", "text": "What is said?"}]},
                        {"role": "assistant", "content": "a tone"}]}
    tree = {"model": {"name": "tiny/qwen2.5-omni", "audio_max_seconds": 60},
            "data": {"train": _jsonl(tmp_path / "v.jsonl", [row])}}
    rep = doctor(tree, *AUDIO_CODES)
    found = [f for f in rep.errors if f.code == "MM082"]
    assert found and "1 audio clip(s)" in found[0].message and "v.jsonl:1" in found[0].where
    tree["model"] = {"name": "tiny/qwen2.5-omni"}
    rep = doctor(tree, *AUDIO_CODES)
    assert "MM082" not in rep.codes() and "MM017" in _codes(rep, "error")


# --------------------------------------------------------------------------------------- local model folders

@pytest.fixture
def vlm_folder(tmp_path):
    """A tiny Qwen2-VL saved to a folder: `processor=False` leaves out the processor files, as an export that
    saved only the model and tokenizer; `weights` is 'ok' (a real safetensors file) or 'lfs' (a pointer);
    `template=False` saves it without a chat template."""
    import torch
    from safetensors.torch import save_file

    from mmtune.models.tiny import tiny_config_and_processor

    def make(name: str, *, processor: bool = True, weights: str = "ok", template: bool = True):
        config, proc = tiny_config_and_processor("tiny/qwen2-vl")
        folder = tmp_path / "exports" / name
        folder.mkdir(parents=True)
        config.save_pretrained(folder)
        if not template:  # an export that lost chat_template.jinja (and the tokenizer's copy)
            proc.chat_template = proc.tokenizer.chat_template = None
        (proc if processor else proc.tokenizer).save_pretrained(folder)
        if weights == "lfs":
            (folder / "model.safetensors").write_text(
                "version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 4400000000\n")
        else:
            save_file({"lm_head.weight": torch.zeros(2, 2)}, str(folder / "model.safetensors"))
        if weights == "cut":  # a download that stopped inside the header
            data = (folder / "model.safetensors").read_bytes()
            (folder / "model.safetensors").write_bytes(data[:40])
        return str(folder)

    return make


@pytest.fixture(params=["offline", "online"])
def hub_mode(request, monkeypatch):
    """A local folder is never downloaded: what it lacks is an error whether or not the hub is reachable."""
    if request.param == "online":
        from huggingface_hub import constants

        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return request.param


def test_merged_vlm_folder_without_its_processor_is_an_error(doctor, vlm_folder, hub_mode):
    """https://github.com/hiyouga/LlamaFactory/issues/5749 (Qwen2-VL + LoRA: the merged folder lost files),
    https://github.com/2U1/Qwen-VL-Series-Finetune/issues/59 ("the processor files are missed"): a VLM folder
    without preprocessor_config.json cannot build its processor. Before, a local folder was checked without
    its family (the processor file was not asked for) and, online, reported as 'will be downloaded'."""
    rep = doctor({**TINY_VL, "model": {"name": vlm_folder("merged", processor=False)}}, "MM024", "MM009")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM024", "error")], rep.findings
    assert "preprocessor_config.json" in rep.findings[0].message
    assert "processor" in rep.findings[0].fix
    clean = doctor({**TINY_VL, "model": {"name": vlm_folder("complete")}}, "MM024", "MM009")
    assert clean.findings == []


def test_cached_hub_snapshot_without_its_processor_is_an_error(doctor, tmp_path, monkeypatch):
    """The same file missing from a hub-cache snapshot (a download of the weights and tokenizer only, as in
    https://github.com/LLaVA-VL/LLaVA-NeXT/issues/20, "preprocessor_config.json is missing"): offline, MM024
    names it; the complete snapshot is silent."""
    import torch
    from huggingface_hub import constants
    from safetensors.torch import save_file

    from mmtune.models.tiny import tiny_config_and_processor

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))

    def snapshot(repo: str, processor: bool):
        config, proc = tiny_config_and_processor("tiny/qwen2-vl")
        base = tmp_path / "hub" / ("models--" + repo.replace("/", "--"))
        commit = "0123456789abcdef0123456789abcdef01234567"
        (base / "refs").mkdir(parents=True)
        (base / "refs" / "main").write_text(commit)
        folder = base / "snapshots" / commit
        folder.mkdir(parents=True)
        config.save_pretrained(folder)
        (proc if processor else proc.tokenizer).save_pretrained(folder)
        save_file({"lm_head.weight": torch.zeros(2, 2)}, str(folder / "model.safetensors"))
        return repo

    rep = doctor({**TINY_VL, "model": {"name": snapshot("someorg/vl-weights-only", False)}}, "MM024")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM024", "error")], rep.findings
    assert "preprocessor_config.json" in rep.findings[0].message
    assert doctor({**TINY_VL, "model": {"name": snapshot("someorg/vl-complete", True)}}, "MM024").findings == []


def test_missing_local_folder_is_an_error_online_too(doctor, tmp_path, hub_mode):
    rep = doctor({**TINY_VL, "model": {"name": str(tmp_path / "exports" / "nope")}}, "MM024")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM024", "error")]
    assert "does not exist" in rep.findings[0].message


def test_org_name_that_is_a_local_path_says_so(doctor, tmp_path, monkeypatch, hub_mode):
    """model.name=models/my-vlm with ./models here is a folder the user meant, not a hub id to download."""
    (tmp_path / "models").mkdir()
    monkeypatch.chdir(tmp_path)
    rep = doctor({**TINY_VL, "model": {"name": "models/my-vlm"}}, "MM024")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM024", "error")]
    assert "./models is a folder here" in rep.findings[0].message


@pytest.mark.parametrize("weights,said,fix", [("lfs", "Git LFS pointer", "git lfs pull"),
                                              ("cut", "cut short", "download the model again")])
def test_git_lfs_pointer_instead_of_weights_is_an_error(doctor, vlm_folder, weights, said, fix):
    """https://github.com/huggingface/transformers/issues/27923 ("SafetensorError: Error while deserializing
    header: HeaderTooLarge"; a clone without git-lfs leaves pointer files, or a download stopped): MM024 names
    the file and the fix; MM009 and MM052, which read the same headers, no longer crash (they did: MM099)."""
    rep = doctor({**TINY_VL, "model": {"name": vlm_folder("cloned", weights=weights)}}, "MM024", "MM009", "MM052")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM024", "error")], rep.findings
    assert said in rep.findings[0].message and fix in rep.findings[0].fix
    assert rep.findings[0].where.endswith("model.safetensors")


def test_custom_code_model_without_trust_remote_code(doctor, tmp_path, vlm_folder):
    """https://github.com/OpenGVLab/InternVL/issues/1244, https://github.com/2U1/Phi3-Vision-Finetune/issues/23
    ("contains custom code which must be executed ... Please pass the argument `trust_remote_code=True`"): a
    folder whose config.json maps its classes to its own code (auto_map) is an MM044 error with the fix.
    Before, transformers' ValueError escaped the config read and a dozen fast checks crashed (MM099)."""
    folder = tmp_path / "InternVL3-1B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "internvl_chat", "architectures": ["InternVLChatModel"],
        "auto_map": {"AutoConfig": "configuration_internvl_chat.InternVLChatConfig",
                     "AutoModel": "modeling_internvl_chat.InternVLChatModel"}}))
    rep = doctor({**TINY_VL, "model": {"name": str(folder)}}, fast=True)
    assert not [f for f in rep.findings if f.code == "MM099"], rep.findings
    found = [f for f in rep.errors if f.code == "MM044"]
    assert found and "auto_map" in found[0].message and found[0].fix.startswith("model.trust_remote_code=true")
    # the whole doctor: the folder's missing files are MM024's, said once (not again as an MM098 build error)
    whole = doctor({**TINY_VL, "model": {"name": str(folder)}})
    assert [f.code for f in whole.errors if f.code in ("MM024", "MM044", "MM098")] == ["MM024", "MM044"]
    clean = doctor({**TINY_VL, "model": {"name": vlm_folder("complete")}}, "MM044")
    assert clean.findings == []


def test_fine_tuned_folder_without_a_chat_template(doctor, vlm_folder):
    """https://github.com/QwenLM/Qwen3-VL/issues/1405 (a fine-tune's output folder: "Cannot use
    apply_chat_template because this processor does not have a chat template"),
    https://github.com/zhangfaen/finetune-Qwen2-VL/issues/3: MM030 is the error, said once; the checks that
    render records are listed as not run with that reason. Before, MM014, MM062 and MM063 each crashed (MM099)."""
    rep = doctor({**TINY_VL, "model": {"name": vlm_folder("sft-out", template=False)}})
    assert not [f for f in rep.findings if f.code in ("MM099", "MM098")], rep.findings
    found = [f for f in rep.errors if f.code == "MM030"]
    assert found and "no chat template" in found[0].message and "chat_template.jinja" in found[0].fix
    assert any(code == "MM014" and "chat template" in why for code, _, why in rep.not_run)
    clean = doctor({**TINY_VL, "model": {"name": vlm_folder("complete")}}, "MM030", "MM014", "MM062", "MM063")
    assert clean.errors == [] and not [f for f in clean.findings if f.code == "MM099"]


# ------------------------------------------------------------------------------------------ empty eval split

def test_eval_split_with_no_usable_record_is_an_error(doctor, tmp_path):
    """https://github.com/OpenRLHF/OpenRLHF/pull/561 (ZeroDivisionError in the eval step when the eval
    dataloader is empty), https://github.com/stanfordnlp/dspy/pull/10031 (an eval set empty after an upstream
    filter). Here every eval record lacks its answer and is skipped: training would log eval_loss 0.0 over
    nothing."""
    from PIL import Image

    Image.new("RGB", (64, 48), "white").save(tmp_path / "a.png")
    no_answer = {"messages": [{"role": "user", "content": "<image>How many?"}], "images": ["a.png"]}
    good = {"messages": _msg("<image>How many?"), "images": ["a.png"]}
    tree = {**TINY_VL, "data": {**TINY_VL["data"], "format": "messages", "on_bad_record": "skip",
                                "eval": _jsonl(tmp_path / "eval.jsonl", [no_answer] * 3)}}
    rep = doctor(tree, "MM031")
    found = [f for f in rep.errors if f.code == "MM031"]
    assert found and "eval: no usable record left (3 row(s) read; 3 no answer)" in found[0].message
    assert found[0].where.startswith("data.eval")
    tree["data"]["eval"] = _jsonl(tmp_path / "eval0.jsonl", [])  # a split with no row at all
    found = [f for f in doctor(tree, "MM031").errors if f.code == "MM031"]
    assert found and "the split holds no row" in found[0].message
    tree["data"]["eval"] = _jsonl(tmp_path / "eval2.jsonl", [no_answer, good])
    assert "MM031" not in doctor(tree, "MM031").codes()


# --------------------------------------------------------------------- already caught: pinned by these reports

def test_more_image_tags_than_images(doctor, tmp_path):
    """https://github.com/hiyouga/LlamaFactory/issues/6135, https://github.com/hiyouga/LlamaFactory/issues/5658
    ("The number of images does not match the number of <image> tokens")."""
    from PIL import Image

    Image.new("RGB", (64, 48), "white").save(tmp_path / "a.png")
    bad = {"messages": _msg("<image><image>Compare them."), "images": ["a.png"]}
    rep = doctor({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": _jsonl(tmp_path / "t.jsonl", [bad])}},
                 "MM016")
    assert [f.code for f in rep.errors] == ["MM016"] and "2 <image> placeholder(s)" in rep.errors[0].message
    ok = {"messages": _msg("<image>Describe it."), "images": ["a.png"]}
    assert doctor({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": _jsonl(tmp_path / "o.jsonl", [ok])}},
                  "MM016").findings == []


def test_image_tag_inside_the_answer_text(doctor, tmp_path):
    """https://github.com/hiyouga/LlamaFactory/issues/8440: a document-parsing label that itself holds
    `<image>` (markdown `![fig](<image>)`) counts as a second placeholder: MM016 names the record."""
    from PIL import Image

    Image.new("RGB", (64, 48), "white").save(tmp_path / "a.png")
    bad = {"messages": _msg("<image>Parse the document.", "See ![fig](<image>) below."), "images": ["a.png"]}
    rep = doctor({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": _jsonl(tmp_path / "t.jsonl", [bad])}},
                 "MM016")
    assert [f.code for f in rep.errors] == ["MM016"] and "t.jsonl:1" in rep.errors[0].message + str(rep.errors[0].where)
    ok = {"messages": _msg("<image>Parse the document.", "See the figure below."), "images": ["a.png"]}
    assert doctor({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": _jsonl(tmp_path / "o.jsonl", [ok])}},
                  "MM016").findings == []


def test_cutoff_that_would_cut_image_tokens(doctor, tmp_path):
    """https://github.com/QwenLM/Qwen3-VL/issues/556 ("Image features and image tokens do not match: tokens:
    1991, features 2990" on multi-image QA, gone with a larger cutoff_len), https://github.com/hiyouga/LlamaFactory/issues/5964
    (cutoff_len 1024 cut the second image's tokens): mmtune never truncates, so a record longer than
    data.max_length with its media tokens is an MM017 error naming it, with the length that fits."""
    from PIL import Image

    for i in range(2):
        Image.new("RGB", (224, 224), "white").save(tmp_path / f"p{i}.png")
    row = {"messages": _msg("<image><image>Which page has the table?", "the second"), "images": ["p0.png", "p1.png"]}
    tree = {"model": {"name": "tiny/qwen2-vl"},
            "data": {"train": _jsonl(tmp_path / "t.jsonl", [row] * 2), "max_length": 64}}
    rep = doctor(tree, "MM017")
    assert [f.code for f in rep.errors] == ["MM017"] and "too long" in rep.errors[0].message
    assert "data.max_length=" in rep.errors[0].fix
    tree["data"]["max_length"] = 2048
    assert doctor(tree, "MM017").errors == []


def test_images_without_a_tag_go_first(doctor, tmp_path):
    """https://github.com/2U1/Qwen-VL-Series-Finetune/issues/181 ("Your dataset hasn't the token `<image>`":
    features and tokens did not match): a record that lists its image and writes no tag gets the image before
    its text (ms-swift's layout), so it is clean; the tag-count mismatch stays MM016's (tests above)."""
    from PIL import Image

    Image.new("RGB", (64, 48), "white").save(tmp_path / "a.png")
    row = {"messages": _msg("What color is the bus?", "white"), "images": ["a.png"]}
    rep = doctor({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": _jsonl(tmp_path / "t.jsonl", [row])}},
                 "MM014", "MM016", "MM018")
    assert rep.findings == [] and rep.tables["data"].splits[0].ok == 1
    assert rep.tables["data"].splits[0].signatures == {"image": 1}


def test_images_given_as_a_string_is_one_image(doctor, tmp_path):
    """https://github.com/hiyouga/LlamaFactory/issues/5883: LLaVA's data writes `"image": "x.jpg"` (a string);
    counted by characters, it mismatched. mmtune reads a string as one image: the clean record passes."""
    from PIL import Image

    Image.new("RGB", (64, 48), "white").save(tmp_path / "a.png")
    row = {"messages": _msg("<image>How many?"), "images": "a.png"}
    rep = doctor({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": _jsonl(tmp_path / "t.jsonl", [row])}},
                 "MM014", "MM016", "MM018")
    assert rep.findings == [] and rep.tables["data"].splits[0].ok == 1


def test_empty_and_missing_image_files(doctor, tmp_path):
    """https://github.com/haotian-liu/LLaVA/issues/601 (VG_100K_2 holds empty images; "No such file or
    directory" when fine-tuning): a 0-byte JPEG and a missing file are MM018 errors with file:line."""
    from PIL import Image

    (tmp_path / "empty.jpg").write_bytes(b"")
    Image.new("RGB", (64, 48), "white").save(tmp_path / "a.png")
    rows = [{"messages": _msg("<image>What is it?"), "images": [name]} for name in ("empty.jpg", "gone.jpg")]
    rep = doctor({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": _jsonl(tmp_path / "t.jsonl", rows)}},
                 "MM018")
    assert {f.code for f in rep.errors} == {"MM018"}, rep.findings  # one error per reason
    assert rep.tables["data"].splits[0].bad == {"corrupt media": 1, "missing media": 1}
    ok = [{"messages": _msg("<image>What is it?"), "images": ["a.png"]}]
    assert doctor({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": _jsonl(tmp_path / "o.jsonl", ok)}},
                  "MM018").errors == []


def test_media_paths_are_relative_to_the_data_file(doctor, tmp_path, monkeypatch):
    """https://github.com/hiyouga/LlamaFactory/issues/10158: image paths in a dataset outside the working
    folder were resolved from the working folder. mmtune resolves them from the data file's folder, so the
    same layout is clean from any working directory."""
    from PIL import Image

    data = tmp_path / "dataset" / "221-1"
    (data / "mllm_demo_data").mkdir(parents=True)
    Image.new("RGB", (64, 48), "white").save(data / "mllm_demo_data" / "1.jpg")
    row = {"messages": _msg("<image>Who are they?", "Two players."), "images": ["mllm_demo_data/1.jpg"]}
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    rep = doctor({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": _jsonl(data / "demo.jsonl", [row])}},
                 "MM018", "MM026")
    assert rep.findings == [] and rep.tables["data"].splits[0].ok == 1


def test_unknown_config_key_is_refused(doctor):
    """https://github.com/hiyouga/LlamaFactory/issues/7412 ("Some keys are not used by the HfArgumentParser:
    ['train_mm_proj_only']"): a key the schema does not have is an MM019 error naming it."""
    rep = doctor({**TINY_VL, "train": {"train_mm_proj_only": False}}, "MM019")
    assert [f.code for f in rep.errors] == ["MM019"] and "train.train_mm_proj_only" in rep.errors[0].message
    assert doctor({**TINY_VL, "train": {"max_steps": 2}}, "MM019").findings == []


def test_lora_target_of_another_architecture(doctor):
    """https://github.com/hiyouga/LlamaFactory/issues/181 ("Target modules ['q_proj', 'v_proj'] not found":
    Baichuan names its attention W_pack): a target no layer of this model has is an MM010 error."""
    rep = doctor({**TINY_VL, "adapter": {"method": "lora", "target_modules": ["W_pack"]}}, "MM010")
    assert [f.code for f in rep.errors] == ["MM010"] and "W_pack" in rep.errors[0].message
    rep = doctor({**TINY_VL, "adapter": {"method": "lora", "target_modules": ["q_proj", "v_proj"]}}, "MM010")
    assert rep.errors == []


def test_flash_attention_2_on_turing(doctor):
    """https://github.com/Dao-AILab/flash-attention/issues/762 ("FlashAttention only supports Ampere GPUs or
    newer" on a T4): MM025 is an error for sm_75, silent on an A100 (bar the local install note)."""
    tree = {**TINY_VL, "model": {"name": "tiny/qwen2-vl", "attn_implementation": "flash_attention_2"}}
    rep = doctor(tree, "MM025", gpu="t4")
    assert "MM025" in _codes(rep, "error") and "sm_75" in rep.errors[0].message
    assert doctor(tree, "MM025", gpu="a100-80gb").errors == []


def test_bf16_on_v100_is_decided_not_crashed(doctor):
    """https://github.com/tatsu-lab/stanford_alpaca/issues/133 ("Your setup doesn't support bf16/gpu" on V100):
    mmtune's resolved run switches to fp16 + GradScaler on a GPU without bf16 and MM005 says so (info, not an
    error: the run does not stop); on an A100 it keeps bf16 and says nothing."""
    tree = {**TINY_VL, "train": {"precision": "bf16"}}
    rep = doctor(tree, "MM005", gpu="v100-32gb")
    assert rep.errors == [] and [f.severity for f in rep.findings] == ["info"]
    assert "fp16 + GradScaler" in rep.findings[0].message
    assert doctor(tree, "MM005", gpu="a100-80gb").findings == []


def test_device_map_auto_for_training(doctor):
    """https://github.com/tloen/alpaca-lora/issues/182 ("Expected all tensors to be on the same device, cuda:0
    and cuda:1" with device_map="auto" in training): MM007 refuses device_map for training."""
    rep = doctor({**TINY_VL, "model": {"name": "tiny/qwen2-vl", "device_map": "auto"}}, "MM007")
    assert [f.code for f in rep.errors] == ["MM007"]
    assert doctor(TINY_VL, "MM007").findings == []


def test_docs_table_lists_every_report_test():
    """docs/doctor.md's "Public bug reports covered" names exactly the report tests of this file."""
    import re
    from pathlib import Path

    here = Path(__file__)
    doc = (here.parents[2] / "docs" / "doctor.md").read_text()
    table = doc[doc.index("## Public bug reports covered"):]
    table = table[:table.find("\n## ", 3)] if "\n## " in table[3:] else table  # up to the next section
    named = set(re.findall(r"\btest_\w+", table)) - {"test_public_reports"}
    defined = set(re.findall(r"^def (test_\w+)", here.read_text(), flags=re.M)) - {"test_docs_table_lists_every_report_test"}
    assert named == defined
    for row in (r for r in table.splitlines() if r.startswith("| https://")):
        url = row.split(" | ")[0].lstrip("| ").split(",")[0]
        assert url in here.read_text(), url  # every report in the table is cited by its test


@pytest.mark.parametrize("content", [None, "{not json", "[1, 2]"], ids=["missing", "not-json", "a-list"])
def test_deepspeed_config_file_that_cannot_be_read(doctor, tmp_path, monkeypatch, clean_launch, content):
    """https://github.com/deepspeedai/DeepSpeed/issues/4156, https://github.com/QwenLM/Qwen/issues/1171
    ("Expected a string path to an existing deepspeed config, or a dictionary ... Received:
    finetune/ds_config_zero3.json"): under `accelerate launch` with a DeepSpeed JSON that is missing or not a
    JSON object, MM049 is the error (a JSON list crashed seven launch checks before: MM099); a readable
    file with "auto" values is silent."""
    path = tmp_path / "ds_config_zero2.json"
    if content is not None:
        path.write_text(content)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(path))
    launch_codes = ("MM045", "MM046", "MM047", "MM048", "MM049", "MM054", "MM055")
    rep = doctor(TINY_VL, *launch_codes)
    assert [(f.code, f.severity) for f in rep.findings] == [("MM049", "error")], rep.findings
    assert "Expected a string path to an existing deepspeed config" in rep.findings[0].message
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}, "gradient_accumulation_steps": "auto",
                                "train_micro_batch_size_per_gpu": "auto", "gradient_clipping": "auto",
                                "bf16": {"enabled": "auto"}}))
    assert doctor(TINY_VL, *launch_codes).findings == []


# ------------------------------------------------------------------------------- second batch of reports


def test_model_type_this_transformers_does_not_know(doctor, tmp_path):
    """https://github.com/hiyouga/LlamaFactory/issues/5495, https://github.com/QwenLM/Qwen3-VL/issues/62 ("The
    checkpoint you are trying to load has model type `qwen2_vl` but Transformers does not recognize this
    architecture": Qwen2-VL on transformers 4.44). The same setup one release on: a checkpoint whose
    model_type this transformers does not have is an MM044 error before any download, with the upgrade as
    the fix; the tiny twin's own folder is silent."""
    folder = str(model_folder(tmp_path, name="Qwen9-VL", tiny="tiny/qwen2-vl", config_json={"model_type": "qwen9_vl"}))
    rep = doctor({**TINY_VL, "model": {"name": folder, "family": "qwen2-vl"}}, "MM044", fast=True)
    assert [(f.code, f.severity) for f in rep.findings] == [("MM044", "error")], rep.findings
    assert "qwen9_vl" in rep.findings[0].message and "pip install -U transformers" in rep.findings[0].fix
    ok = str(model_folder(tmp_path, name="ok", tiny="tiny/qwen2-vl"))
    assert doctor({**TINY_VL, "model": {"name": ok}}, "MM044").findings == []


def test_qwen2_5_vl_lora_in_fp16_on_a_v100(doctor):
    """https://github.com/modelscope/ms-swift/issues/5580 (LoRA on Qwen2.5-VL-3B on a V100 with fp16=True:
    eval_loss nan at every evaluation): Qwen2.5-VL's vision tower overflows in fp16, so fp16 on it is an
    MM041 warning, and asking for bf16 on a V100 (the run's own switch to fp16) is flagged the same way. The
    same run in bf16 on an A100 is silent."""
    tree = {"model": {"name": "Qwen/Qwen2.5-VL-7B-Instruct"}, "data": {"train": "synthetic:counting"},
            "adapter": {"method": "lora"}, "train": {"precision": "fp16"}}
    for precision in ("fp16", "bf16"):
        rep = doctor({**tree, "train": {"precision": precision}}, "MM041", gpu="v100-32gb")
        assert [(f.code, f.severity) for f in rep.findings] == [("MM041", "warning")], (rep.findings, rep.not_run)
    assert doctor({**tree, "train": {"precision": "bf16"}}, "MM041", gpu="a100-80gb").findings == []


def test_lora_under_zero3_without_the_16bit_gather_saves_empty_weights(doctor, launch, monkeypatch):
    """https://github.com/huggingface/trl/issues/4416 (LoRA + DeepSpeed ZeRO-3: adapter_model.safetensors of
    40 bytes, the adapter saved from the rank's empty partitions): a ZeRO-3 launch whose DeepSpeed JSON
    lacks `stage3_gather_16bit_weights_on_model_save` is an MM045 error (mmtune's checkpoints gather the
    partitions, which DeepSpeed allows only with it); with it the launch is silent."""
    lora = {**TINY_VL, "adapter": {"method": "lora"}}
    launch(3, {"zero_optimization": {"stage": 3}, "gradient_accumulation_steps": "auto"})
    rep = doctor(lora, "MM045", "MM049")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM045", "error")], rep.findings
    assert "stage3_gather_16bit_weights_on_model_save" in rep.findings[0].fix
    launch(3, {"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}})
    assert doctor(lora, "MM045", "MM049").findings == []


def test_qlora_launched_under_zero3(doctor, launch):
    """https://github.com/huggingface/peft/issues/2016 ("Cannot apply both PEFT QLoRA and DeepSpeed ZeRO3":
    the 4-bit weights are copied whole to every GPU, OOM), https://github.com/huggingface/peft/issues/1566
    ("cannot load int8/4 model with deepspeed zero3"): QLoRA under a ZeRO-3 launch is an MM046 error; the
    same launch at ZeRO-2, and LoRA at ZeRO-3, are silent."""
    qlora = {**TINY_VL, "adapter": {"method": "qlora"}}
    launch(3, ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL="true")
    rep = doctor(qlora, "MM046", fast=True)
    assert [(f.code, f.severity) for f in rep.findings] == [("MM046", "error")], rep.findings
    assert doctor({**TINY_VL, "adapter": {"method": "lora"}}, "MM046").findings == []
    launch(2)
    assert doctor(qlora, "MM046").findings == []


def test_deepspeed_accumulation_that_disagrees_with_the_run(doctor, launch):
    """https://github.com/hiyouga/LlamaFactory/issues/201 (accelerate config `gradient_accumulation_steps: 4`
    beside `--gradient_accumulation_steps 2`: "Please correct the following DeepSpeed config values that
    mismatch TrainingArguments values"): the disagreement is an MM048 error naming both numbers.
    https://github.com/hiyouga/LlamaFactory/issues/1116 got the same refusal for equal values, the JSON's
    written as a string ("8" vs 8): mmtune compares the numbers, so that setup is silent."""
    tree = {**TINY_VL, "train": {"grad_accum": 2}}
    launch(2, ACCELERATE_GRADIENT_ACCUMULATION_STEPS="4")
    rep = doctor(tree, "MM048")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM048", "error")], rep.findings
    assert "gradient_accumulation_steps=4" in rep.findings[0].message and "train.grad_accum=2" in rep.findings[0].message
    launch(2, {"gradient_accumulation_steps": "8", "train_micro_batch_size_per_gpu": "auto"})
    assert doctor({**TINY_VL, "train": {"grad_accum": 8}}, "MM048").findings == []


def test_base_model_eos_is_not_the_turn_end(tmp_path):
    """https://github.com/hiyouga/LlamaFactory/issues/7454 (chat SFT of the base Qwen2.5-Math-7B: eos is
    <|endoftext|>, turns end with <|im_end|>, so the fine-tune never stops under vLLM's defaults): MM063
    warns that answers are trained to end with a token generation does not stop at; the instruct
    tokenizer (eos <|im_end|>) is silent."""
    from doctor_helpers import context_for, run_codes

    train = _jsonl(tmp_path / "t.jsonl", [{"messages": _msg("What is 2+1?", "3")}])
    tree = {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": train, "format": "messages"}}

    def base_eos(p):
        p.tokenizer.eos_token = "<|endoftext|>"

    rep = run_codes(context_for(tmp_path, tree, base_eos), "MM063")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM063", "warning")], rep.findings
    assert "'<|im_end|>'" in rep.findings[0].message and "generation stops at" in rep.findings[0].message
    assert run_codes(context_for(tmp_path, tree), "MM063").findings == []


def test_tokenizer_with_added_tokens_past_the_embedding(doctor, tmp_path):
    """https://github.com/shibing624/MedicalGPT/issues/275 (SFT of a model whose tokenizer gained tokens in
    added_tokens.json without resizing the embedding: "Assertion `srcIndex < srcSelectDimSize` failed"),
    https://github.com/huggingface/transformers/issues/1848 (the same after a custom tokenizer): a
    checkpoint with fewer embedding rows than its tokenizer has tokens is an MM043 warning (an error when
    a token the run itself writes is past it); the matching checkpoint is silent."""
    from mmtune.models.tiny import tiny_config_and_processor

    n_tokens = len(tiny_config_and_processor("tiny/qwen2")[1])
    small = str(model_folder(tmp_path, name="grown-tokenizer", tiny="tiny/qwen2", vocab_size=n_tokens - 20))
    tree = {"model": {"name": small}, "data": {"train": "synthetic:counting", "synthetic_train_size": 8}}
    rep = doctor(tree, "MM043", fast=True)
    assert [(f.code, f.severity) for f in rep.findings] == [("MM043", "warning")], (rep.findings, rep.not_run)
    assert f"{n_tokens} tokens" in rep.findings[0].message
    tree["model"]["name"] = str(model_folder(tmp_path, name="matching", tiny="tiny/qwen2"))
    assert doctor(tree, "MM043").findings == []


def test_lora_with_gradient_checkpointing_reaches_the_adapters(doctor):
    """https://github.com/hiyouga/LlamaFactory/issues/3324, https://github.com/datawhalechina/self-llm/issues/172
    ("element 0 of tensors does not require grad and does not have a grad_fn": LoRA with gradient
    checkpointing and frozen embeddings, whose reentrant checkpointed blocks get no input that requires
    grad): mmtune checkpoints non-reentrantly and makes the embedding output require grad when the
    embeddings are frozen (enable_input_require_grads), so the real backward MM011 runs on the tiny twin
    reaches every LoRA weight and nothing is flagged; a real step on the run's own model shows the same."""
    import torch

    tree = {**TINY_VL, "model": {"name": "tiny/qwen2-vl", "gradient_checkpointing": True},
            "adapter": {"method": "lora"}}
    rep = doctor(tree, "MM011", "MM013")
    assert [f for f in rep.findings if f.severity != "info"] == [], rep.findings
    from mmtune.config.loader import validate
    from mmtune.doctor.pieces import build_adapted
    from mmtune.models.checkpointing import is_checkpointing
    from mmtune.resolve import local_target, resolve_run

    model = build_adapted(resolve_run(validate(tree), local_target("cpu"))).loaded.model
    assert is_checkpointing(model) and not model.get_input_embeddings().weight.requires_grad
    model.train()
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    model(input_ids=ids, labels=ids).loss.backward()
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    assert lora and all(p.grad is not None for p in lora)


def test_chat_template_without_a_generation_prompt(tmp_path):
    """https://github.com/instructlab/training/pull/232 (the generic chat template saved with a fine-tune
    omitted the `add_generation_prompt` clause: prompts ended after the user turn, "generation behaves
    unexpectedly"), https://github.com/huggingface/transformers/issues/28355 (add_generation_prompt adds no
    assistant start). New check MM069: the eval prompt mmtune builds (encode_prompt) then lacks the assistant
    header every trained answer follows, a warning naming the header; the model's own template is silent."""
    import re

    from doctor_helpers import context_for, run_codes

    from mmtune.data.records import Record

    train = _jsonl(tmp_path / "t.jsonl", [{"messages": _msg("What is 2+1?", "3")}])
    tree = {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": train, "format": "messages"}}

    def no_generation_prompt(p):
        p.chat_template = re.sub(r"\{%-? if add_generation_prompt -?%\}.*?\{%-? endif -?%\}", "", p.chat_template,
                                 flags=re.S)

    ctx = context_for(tmp_path, tree, no_generation_prompt)
    # the premise: the prompt evaluation generates from ends where no trained answer starts
    enc = ctx.need("encoder")
    record = Record("r", "t.jsonl:1", [{"role": "user", "content": [{"type": "text", "text": "What is 2+1?"}]},
                                       {"role": "assistant", "content": [{"type": "text", "text": "3"}]}])
    prompt = enc.tokenizer.decode(enc.encode_prompt(record)["input_ids"].reshape(-1))
    assert prompt.endswith("<|im_end|>\n") and "<|im_start|>assistant\n3" in enc.render(
        enc._template_messages(record.messages))
    rep = run_codes(ctx, "MM069")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM069", "warning")], rep.findings
    assert "'<|im_start|>assistant\\n'" in rep.findings[0].message and "add_generation_prompt" in rep.findings[0].fix
    assert run_codes(context_for(tmp_path, tree), "MM069").findings == []


def test_mistral_style_template_needs_no_generation_prompt(tmp_path):
    """The maintainers' answer in https://github.com/huggingface/transformers/issues/28355: Mistral's answer
    follows `[/INST]` directly, so a template with no generation prompt is right there; MM069 stays silent."""
    from doctor_helpers import context_for, run_codes

    train = _jsonl(tmp_path / "t.jsonl", [{"messages": _msg("What is 2+1?", "3")}])
    tree = {"model": {"name": "tiny/qwen2-vl"}, "data": {"train": train, "format": "messages"}}
    inst = ("{% for m in messages %}{% if m['role'] == 'user' %}[INST] {% for p in m['content'] %}"
            "{% if p['type'] == 'text' %}{{ p['text'] }}{% endif %}{% endfor %} [/INST]{% else %}"
            "{% for p in m['content'] %}{% if p['type'] == 'text' %}{{ p['text'] }}{% endif %}{% endfor %}"
            "<|im_end|>{% endif %}{% endfor %}")

    def mistral(p):
        p.chat_template = inst

    assert run_codes(context_for(tmp_path, tree, mistral), "MM069").findings == []


def test_images_smaller_than_the_merge_factor(doctor, tmp_path):
    """https://github.com/QwenLM/Qwen3-VL/issues/220, https://github.com/huggingface/transformers/pull/37264
    ("height:27 or width:332 must be larger than factor:28": Qwen2-VL's smart_resize refused thin and tiny
    images): the processor of this transformers enlarges them to the factor, so a 20x20 and a 300x20 image
    are clean records; the processor itself gives both a patch grid (the run's own call, no ValueError)."""
    from PIL import Image

    from mmtune.models.tiny import tiny_config_and_processor

    sizes = [(20, 20), (300, 20)]
    for i, size in enumerate(sizes):
        Image.new("RGB", size, "white").save(tmp_path / f"s{i}.png")
    rows = [{"messages": _msg("<image>What is written?", "a"), "images": [f"s{i}.png"]} for i in range(len(sizes))]
    rep = doctor({"model": {"name": "tiny/qwen2-vl"}, "data": {"train": _jsonl(tmp_path / "t.jsonl", rows)}},
                 "MM014", "MM016", "MM017", "MM018")
    assert rep.errors == [] and rep.tables["data"].splits[0].ok == len(sizes), rep.findings
    proc = tiny_config_and_processor("tiny/qwen2-vl")[1]
    grids = proc.image_processor(images=[Image.new("RGB", s) for s in sizes], return_tensors="pt")["image_grid_thw"]
    assert grids.shape[0] == len(sizes) and bool((grids[:, 1:] >= 2).all())


def test_tokenizer_without_a_pad_token(tmp_path):
    """https://github.com/huggingface/trl/issues/466, https://github.com/lm-sys/FastChat/issues/718 ("Asking to pad
    but the tokenizer does not have a padding token"): the resolved run pads with the eos token and says so
    (a decision with its reason; labels mask padding by position, so the eos after answers stays trained);
    MM030 is silent. Only a tokenizer with neither pad nor eos is the MM030 error."""
    import torch
    from doctor_helpers import context_for, run_codes

    from mmtune.data.collate import Collator
    from mmtune.resolve.decisions import decide_pad_id

    def no_pad(p):
        p.tokenizer.pad_token = None

    ctx = context_for(tmp_path, TINY_VL, no_pad)
    proc = ctx.need("resolved").need_processor()
    assert proc.tokenizer.pad_token_id is None
    pad, decision = decide_pad_id(proc)
    assert pad == proc.tokenizer.eos_token_id and "no pad token" in decision.reason
    t = torch.tensor
    batch = Collator(pad)([{"input_ids": t([5, 6, 7]), "labels": t([-100, 6, 7])},
                           {"input_ids": t([5]), "labels": t([5])}])
    assert batch["input_ids"][1].tolist() == [5, pad, pad] and batch["labels"][1].tolist() == [5, -100, -100]
    assert run_codes(ctx, "MM030").findings == []

    def no_pad_no_eos(p):
        p.tokenizer.pad_token = p.tokenizer.eos_token = None

    rep = run_codes(context_for(tmp_path, TINY_VL, no_pad_no_eos), "MM030")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM030", "error")], rep.findings


def test_warmup_as_long_as_the_run(doctor, tmp_path):
    """https://github.com/PrimeIntellect-ai/prime-rl/issues/968 ("Error when warmup_steps == max_steps": every
    step a warmup step): in mmtune the run goes on but is all ramp, an MM035 warning; warmup past the run
    (here through train.epochs on a small set, so the resolved run has fewer steps than the warmup) is the
    error; a tenth of the run is silent."""
    rep = doctor({**TINY_VL, "train": {"max_steps": 10, "warmup_steps": 10}}, "MM035", fast=True)
    assert [(f.code, f.severity) for f in rep.findings] == [("MM035", "warning")], rep.findings
    rep = doctor({**TINY_VL, "train": {"epochs": 1, "warmup_steps": 100}}, "MM035")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM035", "error")], rep.findings
    assert "train.warmup_steps=100 >" in rep.findings[0].message
    assert doctor({**TINY_VL, "train": {"max_steps": 10, "warmup_steps": 1}}, "MM035").findings == []


def test_answer_that_truncation_would_cut_away(doctor, tmp_path):
    """https://github.com/huggingface/trl/issues/6668 (a max_length that cuts the sequence before any
    completion token: every label -100, "loss: 0.0" and the run looks successful),
    https://github.com/hiyouga/LlamaFactory/issues/1494 (labels cut by cutoff_len): mmtune never truncates,
    so a record longer than data.max_length is an MM017 error naming it with the length that fits, never a
    silent loss 0; the length that fits is silent."""
    row = {"messages": _msg("You are a helpful assistant. " * 20 + "What is 2 plus 2?", "The answer is 4.")}
    tree = {"model": {"name": "tiny/qwen2"}, "data": {"train": _jsonl(tmp_path / "t.jsonl", [row] * 2), "max_length": 48}}
    rep = doctor(tree, "MM017")
    found = [f for f in rep.errors if f.code == "MM017"]
    assert found and "2 of 2 records: too long" in found[0].message and "never truncates" in found[0].message
    assert found[0].fix.startswith("data.max_length=")
    import re

    tree["data"]["max_length"] = int(re.match(r"data\.max_length=(\d+)", found[0].fix).group(1))
    assert doctor(tree, "MM017").errors == []


def test_dataset_smaller_than_one_batch(doctor, tmp_path):
    """https://github.com/RUC-GSAI/YuLan-IR/issues/5 ("There seems to be not a single sample in your
    epoch_iterator": 9 examples, batch size 64), https://github.com/ProsusAI/finBERT/issues/12 (7 examples,
    batch 32, "Num steps = 0", division by zero): fewer usable records than one micro-batch is an MM031 error
    with the micro-batch that fits; a micro-batch the set covers is silent."""
    rows = [{"messages": _msg(f"What is {i} + 1?", str(i + 1))} for i in range(9)]
    tree = {"model": {"name": "tiny/qwen2"}, "data": {"train": _jsonl(tmp_path / "t.jsonl", rows)},
            "train": {"micro_batch_size": 64}}
    rep = doctor(tree, "MM031")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM031", "error")], rep.findings
    assert "9 usable record(s), fewer than one micro-batch (64)" in rep.findings[0].message
    assert rep.findings[0].fix == "train.micro_batch_size=9"
    assert doctor({**tree, "train": {"micro_batch_size": 8, "max_steps": 2}}, "MM031").findings == []


def test_zero_steps_with_epochs(doctor, tmp_path):
    """https://github.com/bghira/SimpleTuner/issues/960 (`--num_train_epochs 30` beside `--max_train_steps 0`:
    ZeroDivisionError in the LR schedule): train.max_steps=0 is refused by the schema (MM019, fast);
    train.epochs alone is turned into steps by the resolved run (at least one, with its reason) and the
    schedule check is silent."""
    rep = doctor({**TINY_VL, "train": {"max_steps": 0, "epochs": 30}}, "MM019", fast=True)
    assert [(f.code, f.severity) for f in rep.findings] == [("MM019", "error")], rep.findings
    assert "train.max_steps" in rep.findings[0].message
    from doctor_helpers import context_for

    ctx = context_for(tmp_path, {**TINY_VL, "train": {"epochs": 30}})
    steps = ctx.need("resolved").cfg.train.max_steps
    assert steps >= 1 and any(d.key == "train.max_steps" and "train.epochs=30" in d.reason
                              for d in ctx.need("resolved").decisions)
    assert doctor({**TINY_VL, "train": {"epochs": 30}}, "MM019", "MM035").findings == []


def test_audio_at_another_sampling_rate(doctor, tmp_path):
    """https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/4699 (Qwen2-Audio: an 8 kHz waveform handed to the
    16 kHz Whisper extractor was read as half its length, silently): mmtune's loader resamples every clip
    to the extractor's rate, so 8 kHz and 44.1 kHz clips are clean records and come out at 16 kHz with their
    real duration."""
    from mmtune.data import media

    rows = []
    for sr in (8000, 44100):
        name = _wav(tmp_path / f"c{sr}.wav", 2.0, sr=sr)
        rows.append({"messages": _msg("<audio>What was said?", "hello"), "audios": [name]})
        wave = media.load_audio({"type": "audio", "path": str(tmp_path / name)}, "t", 16000)
        assert abs(len(wave) - 32000) <= 64, (sr, len(wave))  # 2 s at 16 kHz, not 1 s or 5.5 s
    rep = doctor({"model": {"name": "tiny/qwen2-audio"}, "data": {"train": _jsonl(tmp_path / "a.jsonl", rows),
                                                                 "format": "messages"}}, *AUDIO_CODES)
    assert rep.errors == [] and "MM082" not in rep.codes() and rep.tables["data"].splits[0].ok == 2, rep.findings


def test_float_pixels_beside_bf16_weights(tmp_path):
    """https://github.com/hiyouga/LlamaFactory/issues/8647 ("Input type (torch.cuda.FloatTensor) and weight
    type (CUDABFloat16Type) should be the same": fp32 pixel_values into a bf16 vision tower, Mistral-3.1 in
    DPO): the run's collator casts floating media tensors to the compute dtype before any model sees them
    (whether or not the model's own forward casts, as transformers' Qwen2-VL does), so a real bf16 forward +
    backward of the tiny Qwen2-VL on an image record runs (pinned clean; MM004 audits the modules' dtypes)."""
    import torch
    from PIL import Image

    from mmtune.build import build_model_and_adapters
    from mmtune.data.collate import Collator
    from mmtune.data.encode import Encoder
    from mmtune.data.records import Record

    Image.new("RGB", (56, 56), "red").save(tmp_path / "a.png")
    from doctor_helpers import context_for

    resolved = context_for(tmp_path, {**TINY_VL, "train": {"precision": "bf16"}}).need("resolved")
    assert resolved.compute_dtype == torch.bfloat16
    record = Record("r", "t.jsonl:1", [
        {"role": "user", "content": [{"type": "image", "path": str(tmp_path / "a.png")},
                                     {"type": "text", "text": "What color?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "red"}]}])
    item = Encoder.for_run(resolved).encode(record)
    assert item["pixel_values"].dtype == torch.float32  # what the processor returns
    batch = Collator(resolved.pad_token_id, resolved.compute_dtype)([item])
    assert batch["pixel_values"].dtype == torch.bfloat16
    model = build_model_and_adapters(resolved)[0].model.to(torch.bfloat16)  # the report's bf16 tower
    loss = model(**batch).loss
    assert torch.isfinite(loss)
    loss.backward()


def test_batched_eval_generation_pads_left(tmp_path):
    """https://github.com/EvolvingLMMs-Lab/lmms-eval/issues/830 (Qwen2.5-VL evaluated in batches with
    right padding: "can give bad results", fixed by padding left): evaluation's collator pads prompts on
    the left, so greedy answers of a batch are the answers each record gets alone (a real generate on the
    tiny twin); the same batch padded on the right, as the report had it, changes them."""
    from contextlib import nullcontext

    import torch
    from doctor_helpers import context_for

    from mmtune.build import build_model_and_adapters
    from mmtune.data.collate import Collator
    from mmtune.data.encode import Encoder
    from mmtune.data.records import Record
    from mmtune.evaluate.run_eval import generate_answers

    resolved = context_for(tmp_path, TINY_VL).need("resolved")
    torch.manual_seed(0)
    model = build_model_and_adapters(resolved)[0].model
    enc = Encoder.for_run(resolved)
    questions = ["Hi", "What is the capital of France and why is it there?", "Count to three please now"]
    records = [Record(f"r{i}", f"q.jsonl:{i + 1}", [{"role": "user", "content": [{"type": "text", "text": q}]},
                                                   {"role": "assistant", "content": [{"type": "text", "text": "a"}]}])
               for i, q in enumerate(questions)]
    kw = dict(device="cpu", dtype=None, pad_id=resolved.pad_token_id, max_new_tokens=6, autocast=nullcontext)
    alone = [generate_answers(model, enc, [r], batch_size=1, **kw)[0] for r in records]
    assert generate_answers(model, enc, records, batch_size=3, **kw) == alone
    right = Collator(resolved.pad_token_id, None, padding_side="right")([enc.encode_prompt(r) for r in records])
    with torch.no_grad():
        out = model.generate(**right, max_new_tokens=6, do_sample=False, pad_token_id=resolved.pad_token_id)
    tok = enc.tokenizer
    assert [s.strip() for s in tok.batch_decode(out[:, right["input_ids"].shape[1]:], skip_special_tokens=True)] != alone


def test_dataloader_workers_never_fork_the_training_process(doctor, tmp_path):
    """https://github.com/modelscope/ms-swift/issues/1553 ("Cannot re-initialize CUDA in forked subprocess"
    fine-tuning DeepSeek-VL with DataLoader workers): the resolved run starts train.num_workers workers from
    a fork server or by spawn, never by forking the process that holds CUDA, and says so; MM020 collates a
    real batch on the CPU and pickles it across (silent)."""
    from doctor_helpers import context_for

    tree = {**TINY_VL, "train": {"num_workers": 2}}
    resolved = context_for(tmp_path, tree).need("resolved")
    assert resolved.loader.num_workers == 2 and resolved.loader.start_method in ("forkserver", "spawn")
    assert resolved.loader.loader_kwargs()["multiprocessing_context"] != "fork"
    rep = doctor(tree, "MM020")
    assert rep.findings == [] and rep.not_run == [], (rep.findings, rep.not_run)
