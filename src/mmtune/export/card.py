"""The export's model card (README.md): what the folder is, how it was trained, how well it does against the
best constant answer, and the exact code that loads it with transformers, peft and vLLM; plus the check that
plain transformers loads the exported processor (Qwen-VL's needs torchvision, which mmtune cannot pin).

torchvision is not a dependency of mmtune: every torchvision wheel pins the torch it was built against
(read from the wheels' METADATA: 0.28.0 requires torch==2.13.0, 0.29.0 torch==2.14.0, 0.29.1 torch>=2.14.0),
so an unpinned `pip install torchvision` picks the newest and replaces the torch a user installed (the CPU
build with a CUDA one, or 2.13 with 2.14). The card and `mmtune export` name the one that matches instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Loading the processor the way a user would: a fresh interpreter, plain transformers, no mmtune.
_LOAD_PROCESSOR = "import sys; from transformers import AutoProcessor; AutoProcessor.from_pretrained(sys.argv[1])"


def torchvision_install(torch_version: str) -> str:
    """The pip command for the torchvision built for `torch_version` (2.N -> 0.(N+15), torchvision's scheme
    since torch 2.0 / torchvision 0.15), from the same index (the CPU build's local tag +cpu -> its index)."""
    base, _, local = torch_version.partition("+")
    major, minor = (int(x) for x in base.split(".")[:2])
    pin = f"torchvision==0.{minor + 15}.*" if major == 2 else "torchvision"
    index = f" --index-url https://download.pytorch.org/whl/{local}" if local else ""
    return f"pip install '{pin}'{index}"


def processor_problem(folder: Path) -> str | None:
    """None when plain transformers loads the folder's processor; else what is missing and how to add it."""
    if not any((folder / n).is_file() for n in ("processor_config.json", "preprocessor_config.json",
                                                "tokenizer_config.json")):
        return None
    res = subprocess.run([sys.executable, "-c", _LOAD_PROCESSOR, str(folder)], capture_output=True, text=True,
                         timeout=300, env=_plain_env())
    if res.returncode == 0:
        return None
    tail = (res.stderr.strip().splitlines() or ["(no message)"])[-1]
    if "torchvision" in res.stderr:
        import torch

        return (f"AutoProcessor.from_pretrained needs torchvision, which is not installed here; install the build "
                f"matching torch {torch.__version__}: {torchvision_install(torch.__version__)}")
    return f"AutoProcessor.from_pretrained fails on this folder: {tail}"


def _plain_env() -> dict:
    import os

    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # not mmtune's source tree: what a user's fresh environment has
    return env


def _hub_id(name: str) -> bool:
    """Whether `name` can be the card's `base_model`: a Hub model id, never a local path. The Hub validates the
    card before it takes an upload and refuses a path ("base_model" ... "is not valid. Use a model id from
    https://hf.co/models": https://github.com/huggingface/transformers/issues/33922). A path is told by its form
    (`~/models/x`, `./x`, `/data/x`, `runs/a/final`), as models.hub_files reads model.name, not by whether it
    exists on the machine that exports: `~` is not expanded by Path.exists, and a run exported on another
    machine (or after its base folder moved) names a folder that is not there."""
    import re

    from ..models.hub_files import is_local_name

    return (not name.startswith("tiny/") and not is_local_name(name)
            and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*", name) is not None)


def write_card(out: Path, *, kind: str, cfg, run_dir: Path, ckpt: Path, load_path: str,
               processor_note: str | None, vllm_notes: list[str]) -> Path:
    """README.md in the export folder. `kind`: adapter | merged | full; `load_path`: what the code loads
    (the Hub repo id when pushed, else the folder)."""
    summary = _summary(run_dir)
    arch = _architecture(out, kind)
    base = cfg.model.name
    method = cfg.adapter.method
    lines = ["---", f"library_name: {'peft' if kind == 'adapter' else 'transformers'}"]
    if _hub_id(base):  # the Hub refuses a card whose base_model is not a model id (a local path)
        lines.append(f"base_model: {base}")
    lines += ["tags:", "- mmtune", f"- {method}", "---", "",
              f"# {run_dir.name}", "",
              f"Fine-tuned from `{base}` with [mmtune](https://github.com/mmtune/mmtune): "
              f"{_method(cfg)}. This folder holds {_what(kind)}.", "",
              "## Training", "",
              f"- data: train `{_spec(cfg.data.train)}`, eval `{_spec(cfg.data.eval) if cfg.data.eval else '(none)'}`",
              f"- steps: {summary.get('steps', '?')} (checkpoint `{ckpt.name}`), learning rate {cfg.train.lr}, "
              f"precision {cfg.train.precision}",
              f"- system prompt: {json.dumps(cfg.data.system_prompt) if cfg.data.system_prompt else '(none)'}", ""]
    lines += _eval_section(summary)
    lines += ["## Load it", ""]
    if kind == "adapter":
        lines += [f"> **Requirement**: {peft_requirement()}", ""]
    if processor_note:
        lines += [f"> **Requirement**: {processor_note}", ""]
    layout = None if kind == "adapter" else config_layout_requirement(out)
    if layout:
        lines += [f"> **Requirement**: {layout}", ""]
    lines += _transformers_code(kind, arch, base, load_path, cfg) + [""]
    lines += ["### vLLM", "", "```bash", _vllm_line(kind, base, load_path, cfg, run_dir.name, arch), "```", ""]
    lines += [f"- {n}" for n in vllm_notes] + ([""] if vllm_notes else [])
    lines += ["### mmtune", "", "```bash", f"mmtune chat {load_path} \"your question\"  # --image photo.png",
              f"mmtune serve {load_path}  # OpenAI-compatible API on http://127.0.0.1:8000/v1", "```", ""]
    path = out / "README.md"
    path.write_text("\n".join(lines))
    return path


def peft_requirement() -> str:
    """The peft that reads this adapter_config.json: it holds every LoraConfig key of the peft that wrote it, and
    peft 0.13 and older refuse a key they do not know (measured on an export of peft 0.21.2: 0.12.0 and 0.13.0
    raise, 0.14.0 and 0.15.0 drop the unknown keys with a warning; https://github.com/huggingface/peft/issues/2275)."""
    import peft
    import transformers

    return (f"peft>=0.14 (older peft stops with \"TypeError: LoraConfig.__init__() got an unexpected keyword "
            f"argument\" on this adapter_config.json); written with peft {peft.__version__} and transformers "
            f"{transformers.__version__}")


def config_layout_requirement(folder: Path) -> str | None:
    """What reads this config.json, when transformers 5 wrote it: RoPE settings (rope_theta, the scaling, Qwen-VL's
    mrope_section) only inside `rope_parameters`, which transformers 4.x does not know; a server or converter on 4.x
    builds the config with its class default rope_theta and no error (vllm#42624: 10000 read for 500000), so the
    model answers with positions it was not trained on. None for a config that keeps the legacy fields."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    parts = [config] + [v for v in config.values() if isinstance(v, dict) and "model_type" in v]  # text_config ...
    if not any("rope_parameters" in p and "rope_theta" not in p for p in parts):
        return None
    return (f"transformers>=5 to read this config.json (written with transformers "
            f"{config.get('transformers_version', '5')}): it keeps RoPE settings in `rope_parameters`, which "
            "transformers 4.x ignores, so a server or GGUF converter built on 4.x (vLLM, SGLang, TGI or llama.cpp "
            "releases that pin it) runs the model with its default rope_theta, silently; use a release built on "
            "transformers 5")


def _summary(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}


def _architecture(out: Path, kind: str) -> str:
    try:
        if kind == "adapter":
            mapping = json.loads((out / "adapter_config.json").read_text()).get("auto_mapping") or {}
            return mapping.get("base_model_class") or "AutoModelForImageTextToText"
        return json.loads((out / "config.json").read_text())["architectures"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return "AutoModelForImageTextToText"


def _method(cfg) -> str:
    a = cfg.adapter
    if a.method == "full":
        return "full fine-tuning"
    extra = f", components trained in full: {', '.join(a.train_components)}" if a.train_components else ""
    return f"{'DoRA' if a.use_dora else a.method.upper()} r={a.r}, alpha={a.alpha or 2 * a.r}{extra}"


def _what(kind: str) -> str:
    return {"adapter": "the PEFT adapter only (load the base model, then this adapter on top)",
            "merged": "the base model with the adapter merged in: a plain transformers model",
            "full": "the fully fine-tuned model: a plain transformers model"}[kind]


def _spec(spec) -> str:
    return ", ".join(str(s) for s in spec) if isinstance(spec, list) else str(spec)


def _eval_section(summary: dict) -> list[str]:
    ev, baseline = summary.get("eval") or {}, summary.get("baseline") or {}
    if not ev:
        return ["## Evaluation", "", "No evaluation was run.", ""]
    rows = ["## Evaluation", "", "Final evaluation of the run, beside the best constant answer (the score of always "
            "answering the most common reference: what the model must beat to have learned anything).", "",
            "| metric | this model | best constant answer |", "|---|---|---|"]
    for k, v in ev.items():
        b = baseline.get(k)
        rows.append(f"| {k} | {_num(v)} | {_num(b) if b is not None else '-'} |")
    best = summary.get("best") or {}
    if best.get("path"):
        rows += ["", f"Best checkpoint by {best.get('metric')}: `{best['path']}` (step {best.get('step')})."]
    return rows + [""]


def _num(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _transformers_code(kind: str, arch: str, base: str, path: str, cfg) -> list[str]:
    text_only = arch.endswith("ForCausalLM")
    content = '"Hello"' if text_only else '[{"type": "image", "url": "photo.png"}, {"type": "text", "text": "Hello"}]'
    load_base = f'"{base}"' if kind == "adapter" else "path"
    code = ["### transformers" + (" + peft" if kind == "adapter" else ""), "", "```python"]
    code += [f"from transformers import AutoProcessor, {arch}"]
    if kind == "adapter":
        code += ["from peft import PeftModel"]
    code += ["", f'path = "{path}"', f"model = {arch}.from_pretrained({load_base})"]
    if kind == "adapter":
        code += ["model = PeftModel.from_pretrained(model, path)"]
    code += ["processor = AutoProcessor.from_pretrained(path)",
             'messages = [{"role": "user", "content": ' + content + "}]",
             "inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,",
             '                                       return_dict=True, return_tensors="pt")',
             f"out = model.generate(**inputs, max_new_tokens={cfg.eval.max_new_tokens}, do_sample=False)",
             'print(processor.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))', "```"]
    return code


def _vllm_line(kind: str, base: str, path: str, cfg, name: str, arch: str) -> str:
    """The same `vllm serve` line `mmtune serve --backend vllm` derives: max model length from the trained
    prompts plus the answer length, media per prompt from the family, LoRA rank from the adapter."""
    import shlex

    from ..models.families import FAMILIES
    from .vllm import pixel_kwargs, vllm_command

    family = next((f for f in FAMILIES.values() if f.model_class == arch), None)
    media = {k: 4 for k in sorted(family.modalities) if k != "text"} if family is not None else {}
    lora = Path(path) if kind == "adapter" else None
    cmd = vllm_command(model=base if kind == "adapter" else path, served_name=name,
                       max_model_len=cfg.data.max_length + cfg.eval.max_new_tokens, media=media, host="127.0.0.1",
                       port=8000, lora=lora, lora_rank=cfg.adapter.r, processor=pixel_kwargs(cfg, media, lora))
    return " ".join(shlex.quote(c) for c in cmd)
