"""The fuzzer's templates for the data kinds past plain SFT layouts: preference pairs (DPO, in the three layouts
mmtune reads), GRPO prompts with their answers, OpenAI / ShareGPT tool-calling records, grounding boxes, audio
(the tiny Qwen2-Audio twin), video (files, frame lists, frame folders; an omni model's `use_audio`), raw-text
documents (data.format=text) and mixtures whose sources are malformed. Each template is a good record with the
format, the config overrides (objective) and the tiny model it is read by; fuzz_records.build mutates them like its
own (mutate / damaged_line) and runs them through every stage (the objective's own encoder included: PairEncoder for
dpo, PromptEncoder for grpo).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

DPO = ("train.objective=dpo",)
GRPO = ("train.objective=grpo",)
TOOLS_MODEL = "tiny/qwen2+tools"  # the tiny Qwen2 rendering with Qwen2.5-Instruct's chat template (it writes tools)
QWEN25_TEMPLATE = Path(__file__).parent / "fixtures" / "qwen2_5_instruct_chat_template.jinja"


@dataclass
class Template:
    fmt: str
    record: dict
    model: str = "tiny/qwen2-vl"
    overrides: tuple = field(default_factory=tuple)


WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
_USER_IMG = [{"type": "image"}, {"type": "text", "text": "What is it?"}]
_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
_OPENAI_TOOLS = {"messages": [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [_CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "20 degrees"},
    {"role": "assistant", "content": "It is 20 degrees."}], "tools": [{"type": "function", "function": WEATHER}]}

TEMPLATES: dict[str, Template] = {
    # DPO pairs: TRL's conversational layout, LLaMA-Factory's ranking rows, RLAIF-V's columns (data/preference.py)
    "dpo_trl": Template("preference", {"prompt": [{"role": "user", "content": _USER_IMG}],
                                       "chosen": [{"role": "assistant", "content": "a cat"}],
                                       "rejected": [{"role": "assistant", "content": "a dog"}], "images": ["ok.png"]},
                        overrides=DPO),
    "dpo_trl_text": Template("preference", {"prompt": "<image>What is it?", "chosen": "a cat", "rejected": "a dog",
                                            "images": ["ok.png"]}, overrides=DPO),
    "dpo_ranking": Template("preference", {"conversations": [{"from": "human", "value": "<image>What is it?"}],
                                           "chosen": {"from": "gpt", "value": "a cat"},
                                           "rejected": {"from": "gpt", "value": "a dog"}, "images": ["ok.png"]},
                            overrides=DPO),
    "dpo_rlaifv": Template("preference", {"ds_name": "x", "image": "ok.png", "question": "What is it?",
                                          "chosen": "a cat", "rejected": "a dog", "origin_dataset": "y"},
                           overrides=DPO),
    # GRPO prompts: the prompt, its answer and references (rewards count / format read them)
    "grpo_vqa": Template("vqa", {"image": "ok.png", "question": "How many? Answer as COUNT: <n>.",
                                 "answers": ["COUNT: 3", "COUNT: three"]}, overrides=GRPO),
    "grpo_messages": Template("messages", {"messages": [
        {"role": "user", "content": [{"type": "image", "path": "ok.png"}, {"type": "text", "text": "How many?"}]},
        {"role": "assistant", "content": "COUNT: 3"}]}, overrides=GRPO),
    # tool calling: OpenAI's layout, LLaMA-Factory's ShareGPT (glaive); and on a template that renders no tools
    "tools_openai": Template("messages", _OPENAI_TOOLS, model=TOOLS_MODEL),
    "tools_sharegpt": Template("messages", {"conversations": [
        {"from": "human", "value": "Weather in Paris?"},
        {"from": "function_call", "value": json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})},
        {"from": "observation", "value": "20 degrees"},
        {"from": "gpt", "value": "It is 20 degrees."}], "tools": json.dumps([WEATHER])}, model=TOOLS_MODEL),
    "tools_no_template": Template("messages", _OPENAI_TOOLS),
    # grounding: Qwen2-VL's box text (0-1000 grid), Qwen2.5-VL's bbox_2d JSON (pixels); the doctor's MM273 reads them
    "grounding_qwen2": Template("messages", {"messages": [
        {"role": "user", "content": [{"type": "image", "path": "ok.png"}, {"type": "text", "text": "Where is the cat?"}]},
        {"role": "assistant", "content": "<|object_ref_start|>cat<|object_ref_end|><|box_start|>(100,200),(300,400)"
                                         "<|box_end|>"}]}),
    "grounding_qwen25": Template("messages", {"messages": [
        {"role": "user", "content": [{"type": "image", "path": "ok.png"}, {"type": "text", "text": "Find the cat."}]},
        {"role": "assistant", "content": '```json\n[{"bbox_2d": [2, 3, 20, 24], "label": "cat"}]\n```'}]},
        model="tiny/qwen2.5-vl"),
    # audio (Qwen2-Audio): a part, ShareGPT's tag + list, a transcription row
    "audio_messages": Template("messages", {"messages": [
        {"role": "user", "content": [{"type": "audio", "path": "ok.wav"}, {"type": "text", "text": "What is it?"}]},
        {"role": "assistant", "content": "a tone"}]}, model="tiny/qwen2-audio"),
    "audio_sharegpt": Template("messages", {"conversations": [{"from": "human", "value": "<audio>What is it?"},
                                                              {"from": "gpt", "value": "a tone"}], "audios": ["ok.wav"]},
                               model="tiny/qwen2-audio"),
    "asr": Template("asr", {"audio": "ok.wav", "sentence": "a tone"}, model="tiny/qwen2-audio"),
    # datasets' decoded Audio feature: the samples and their rate in the row (a dataset saved after decoding)
    "asr_array": Template("asr", {"audio": {"path": None, "array": [round(0.3 * math.sin(i / 5), 4) for i in range(1600)],
                                            "sampling_rate": 16000}, "sentence": "a tone"}, model="tiny/qwen2-audio"),
    # video: a file, a list of frame files, a folder of frames, ShareGPT's tag + list; an omni model's own audio track
    "video_file": Template("messages", {"messages": [
        {"role": "user", "content": [{"type": "video", "path": "ok.mp4"}, {"type": "text", "text": "What happens?"}]},
        {"role": "assistant", "content": "it fades"}]}),
    "video_frames": Template("messages", {"messages": [
        {"role": "user", "content": [{"type": "video", "video": ["ok.png"] * 8},
                                     {"type": "text", "text": "What happens?"}]},
        {"role": "assistant", "content": "nothing"}]}),
    "video_sharegpt": Template("messages", {"conversations": [{"from": "human", "value": "<video>What happens?"},
                                                              {"from": "gpt", "value": "nothing"}],
                                            "videos": ["frames_ok"]}),
    "video_use_audio": Template("messages", {"messages": [
        {"role": "user", "content": [{"type": "video", "path": "av.mp4", "use_audio": True},
                                     {"type": "text", "text": "What happens?"}]},
        {"role": "assistant", "content": "it fades"}]}, model="tiny/qwen2.5-omni"),
    # raw text (data.format=text, continued pretraining): a document cut into windows past data.max_length
    "raw_text": Template("text", {"text": "The quick brown fox jumps over the lazy dog. " * 40, "id": "doc-1"},
                         model="tiny/qwen2"),
    "raw_text_vl": Template("text", {"content": "A short document about cats."}),
}


def values() -> list:
    """What these kinds' fields may hold besides the shared pool: pair sides, tool calls and schemas, boxes."""
    return [
        {"from": "human", "value": "x"}, {"role": "user", "content": "x"}, [{"role": "assistant", "content": "a"}] * 2,
        [{"role": "assistant", "content": [{"type": "image", "path": "ok.png"}]}], {"role": "assistant", "content": None},
        {"type": "function", "function": None}, {"type": "function", "function": {"name": None, "arguments": "{"}},
        {"name": "get_weather", "arguments": [1, 2]}, {"name": 5, "arguments": {"a": float("nan")}},
        [{"type": "function"}], "[{\"name\": \"f\"}]", "{\"name\": ", "not json", [WEATHER, None],
        {"role": "tool", "content": None}, {"role": "function", "content": "r"}, {"from": "observation", "value": 3},
        {"from": "function_call", "value": "{\"name\": \"f\", \"arguments\": \"{\\\"a\\\"\"}"},
        "<|box_start|>(1e999,nan),(3,4)<|box_end|>", "<|box_start|>(-5,2000),(1,1)<|box_end|>",
        "<|box_start|>(((((<|box_end|>",
        "<|box_start|>(-" + "9" * 400 + ",-1),(-1,-1)<|box_end|>",
        '{"bbox_2d": [1, 2, "x", null]}', '{"bbox_2d": [1e400, 0, 0, 0]}',
        '"bbox_2d": [9999999999999999999999, 1, 2]', '"bbox_2d": []', "frames_ok", "frames_empty",
        ["ok.png"], ["ok.png", "missing.png"], [["ok.png", "ok.png"]], {"type": "video", "video": []},
        {"type": "video", "video": [None, 3]}, {"type": "video", "path": "ok.mp4", "use_audio": "yes"},
        {"type": "audio", "audio": "ok.wav"}, {"type": "input_audio", "input_audio": {"data": None}},
        "[" * 5000, '{"name": "f", "arguments": ' + "{\"a\": " * 3000, 1e999, 48000, 16000.5,
        "ok.wav", "ok.mp4", "av.mp4", "rate8k.wav", "zero_frames.mp4", "text.mp4", -0.0, 2 ** 63,
        # a document's text: turn tokens inside it, nothing but whitespace, one 60,000-character word, NUL bytes
        "before <|im_start|>assistant\nafter<|im_end|>", " \n\t ", "w" * 60_000, "a\x00b\x00", "<|endoftext|>" * 3]


def write_media(folder: Path) -> None:
    """A frame folder (model.video_frames' 8 frames) and a video with a sound track, beside the shared media
    (fuzz_kinds.write_kind_media writes the rest)."""
    import av
    import numpy as np
    from PIL import Image

    frames = folder / "frames_ok"
    frames.mkdir(parents=True, exist_ok=True)
    for i in range(8):
        Image.new("RGB", (32, 32), (20 * i, 20, 90)).save(frames / f"{i:03d}.png")
    if (folder / "av.mp4").exists():
        return
    with av.open(str(folder / "av.mp4"), "w") as out:
        v, a = out.add_stream("mpeg4", rate=8), out.add_stream("aac", rate=16000)
        v.width, v.height, v.pix_fmt = 32, 32, "yuv420p"
        a.layout = "mono"
        for i in range(16):
            f = av.VideoFrame.from_ndarray(np.full((32, 32, 3), 15 * i, np.uint8), format="rgb24")
            out.mux(v.encode(f))
        t = np.arange(32000, dtype=np.float32) / 16000
        tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
        for k in range(0, len(tone), 1024):
            af = av.AudioFrame.from_ndarray(tone[None, k:k + 1024], format="fltp", layout="mono")
            af.sample_rate, af.pts = 16000, k
            out.mux(a.encode(af))
        out.mux(v.encode())
        out.mux(a.encode())


def mixture_specs(folder: Path, rng: random.Random, files: list[tuple[str, str]], pool: list) -> list[str]:
    """data.train lists (YAML) over the fuzzed files (path, format): most sources as they should be read (so
    the mixture reaches its draw and the records their checks), some read as another format, a missing path,
    a folder of frames, weights and sample counts of every wrong kind, other keys holding anything."""
    bad = [0, -1, 0.0, float("nan"), 1e308, "3", None, True, [], "x"]
    out = []
    for _ in range(10):
        srcs = []
        for _ in range(rng.randint(1, 3)):
            path, fmt = rng.choice(files)
            if rng.random() < 0.15:
                path = rng.choice([str(folder / "missing.jsonl"), str(folder / "frames_ok"), ""])
            if rng.random() < 0.15:
                fmt = rng.choice(["messages", "vqa", "preference", "asr", "alpaca", "nonsense"])
            src = {"path": path, "format": fmt}
            r = rng.random()
            if r < 0.3:
                src["weight"] = rng.choice(bad + [0.5, 2, 2, 1])
            elif r < 0.6:
                src["samples"] = rng.choice(bad + [1, 7, 7, 30])
            if rng.random() < 0.2:
                src[rng.choice(["eval", "name", "columns", "media_root", "metrics"])] = rng.choice(bad + pool[:5])
            srcs.append(src)
        out.append(json.dumps(srcs, default=str).replace("NaN", ".nan"))
    return out
