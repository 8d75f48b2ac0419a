"""`mmtune serve --backend vllm`: vLLM's own OpenAI server, started on what the target holds (a merged or
full model folder, or the base model + the run's LoRA adapter), with flags derived from the run through the
same `decide` as the native server: served name, context, media per prompt; plus vLLM's own: the LoRA rank
it must reserve, and a max model length it preallocates KV cache for.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import MMTuneError
from .engine import ServeOptions, ServeSettings, decide

INSTALL = ("pip install vllm  (Linux with an NVIDIA GPU; see https://docs.vllm.ai/en/latest/getting_started/"
           "installation/). mmtune does not install it: vLLM pins its own torch build")


@dataclass(frozen=True)
class VllmPlan:
    cmd: list[str]
    env: dict  # added to the environment (VLLM_API_KEY: never on the command line)
    settings: ServeSettings
    decisions: tuple  # (what, value, why), the vLLM-specific ones after the shared ones


def plan_vllm(target: str, options: ServeOptions, *, host: str, port: int) -> VllmPlan:
    from ..config import load_config
    from ..export.card import config_layout_requirement
    from ..export.vllm import lora_problems, pixel_kwargs, vllm_command
    from ..models.model_config import load_hf_config
    from ..models.tiny import is_tiny

    path = Path(target).expanduser()
    model, lora, cfg = _what_to_load(path, target)
    if is_tiny(str(model)):
        raise MMTuneError(f"vLLM loads a model by hub id or folder; {model} is mmtune's tiny random twin",
                          where=target, fix=f"mmtune export {target} --merge, then mmtune serve <that export> --backend vllm")
    if cfg is None:
        cfg = load_config(None, [f"model.name={model}", "adapter.method=lora"])
    model_config = load_hf_config(str(model))
    family = _family(model_config)
    modalities = set(family.modalities) if family is not None else {"text"}
    settings = decide(target, cfg, model_config, modalities, options)
    decisions = []
    if lora is not None:
        problems = lora_problems(lora, family)
        if problems:
            raise MMTuneError("vLLM would not serve this adapter as trained: " + "; ".join(problems), where=str(lora),
                              fix=f"merge it: mmtune export {target} --merge, then mmtune serve <that export> --backend vllm")
        rank = json.loads((lora / "adapter_config.json").read_text())["r"]
        decisions.append(("max LoRA rank", rank, "the adapter's r, rounded up to a rank vLLM accepts"))
    else:
        rank = None
        layout = config_layout_requirement(Path(model)) if Path(model).is_dir() else None
        if layout:  # the same requirement the export's card states
            decisions.append(("vLLM's transformers", ">= 5", layout))
    max_len = settings.context
    if options.max_model_len is None and settings.context:
        # vLLM reserves KV cache for every position up to --max-model-len: sized to the prompts trained on
        # (data.max_length) plus the answer length, not the model's whole context.
        max_len = min(settings.context, cfg.data.max_length + settings.default_max_tokens)
        decisions.append(("vLLM max model len", max_len, f"data.max_length ({cfg.data.max_length}) + default max_tokens "
                          f"({settings.default_max_tokens}), within the model's {settings.context}"))
    processor = pixel_kwargs(cfg, settings.media_per_prompt, lora)
    if processor:
        decisions.append(("vLLM processor", json.dumps(processor), "the run's model.min_pixels / max_pixels: vLLM "
                          "builds the processor from the base model's folder, whose pixel range training did not use"))
    cmd = vllm_command(model=str(model), served_name=settings.served_name, max_model_len=max_len,
                       media=settings.media_per_prompt, host=host, port=port, lora=lora, lora_rank=rank,
                       processor=processor)
    env = {"VLLM_API_KEY": settings.api_key} if settings.api_key else {}
    if cfg.data.system_prompt:
        decisions.append(("system prompt", "send it", "vLLM renders the model folder's chat template without the run's "
                          "data.system_prompt: clients add it as the first message"))
    return VllmPlan(cmd=cmd, env=env, settings=settings, decisions=tuple(decisions))


def _what_to_load(path: Path, target: str):
    """(model folder or id, LoRA adapter folder or None, the run's config or None)."""
    from ..chat import is_run_or_checkpoint
    from ..export import run_config_of
    from ..export.origin import export_checkpoint
    from ..train.checkpoint import resolve_checkpoint

    if is_run_or_checkpoint(path):
        ckpt = resolve_checkpoint(path)
        cfg = run_config_of(ckpt)
        if (ckpt / "adapter").is_dir():
            return cfg.model.name, (ckpt / "adapter").resolve(), cfg
        if (ckpt / "model").is_dir():
            return (ckpt / "model").resolve(), None, cfg
        raise MMTuneError(f"{ckpt} holds a sharded full fine-tune, which vLLM cannot read", where=str(ckpt),
                          fix=f"mmtune export {target}, then mmtune serve <that export> --backend vllm")
    origin = export_checkpoint(path)  # an mmtune export: its run's config, where the run is still there
    cfg = run_config_of(origin) if origin is not None else None
    if (path / "config.json").is_file():
        return path.resolve(), None, cfg
    if (path / "adapter_config.json").is_file():
        if cfg is None:
            raise MMTuneError(f"{path} is an adapter export whose run is gone: its base model is unknown",
                              where=str(path), fix="serve the run folder, or a merged export (mmtune export --merge)")
        return cfg.model.name, path.resolve(), cfg
    if path.exists():
        raise MMTuneError(f"{path} is neither a run, a checkpoint nor a model folder", where=str(path),
                          fix="give a run folder, a checkpoint, an export or a model id")
    return target, None, None


def _family(model_config):
    from ..models.families import family_for_model_type, vision_model_type

    try:
        return family_for_model_type(getattr(model_config, "model_type", ""), vision_model_type(model_config))
    except MMTuneError:
        return None  # a model mmtune has no family for: served as text, its LoRA not checked per component


def run_vllm(target: str, options: ServeOptions, *, host: str, port: int, dry_run: bool = False) -> None:
    """Print the derived command; run it (replacing this process, so signals reach vLLM) unless dry_run."""
    from ..console import console

    plan = plan_vllm(target, options, host=host, port=port)
    for what, value, why in (*plan.settings.decisions, *plan.decisions):
        console.print(f"[dim]{what}: {value}  ({why})[/]", soft_wrap=True)
    line = " ".join(_quote(c) for c in plan.cmd)
    env_line = "VLLM_API_KEY=... " if plan.env else ""
    if dry_run:
        console.print(f"{env_line}{line}", soft_wrap=True, markup=False)
        return
    exe = shutil.which("vllm")
    if exe is None:
        raise MMTuneError("vLLM is not installed here", where="--backend vllm",
                          fix=f"{INSTALL}; then rerun, or run on a machine that has it: {env_line}{line}")
    console.print(f"starting: {env_line}{line}", soft_wrap=True, markup=False)
    os.execve(exe, plan.cmd, {**os.environ, **plan.env})


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
