"""What vLLM makes of an export: the `vllm serve` command line for it, and what its LoRA loader will not take.

Facts read from vLLM's source (vllm/config/lora.py, vllm/lora/peft_helper.py), checked against vLLM 0.26:
- `--max-lora-rank` takes one of MAX_LORA_RANKS only;
- an adapter with `modules_to_save` (mmtune's `adapter.train_components`) or DoRA is refused when the first
  request uses it ("vLLM only supports modules_to_save being None", "vLLM does not yet support DoRA"), and an
  adapter bias is not supported;
- on multimodal models vLLM adds LoRA to the language model only: LoRA on a vision / audio tower or the
  projector is ignored (a warning in vLLM's log), so that model would answer without that part of training.
Each of these has the same remedy: merge (`mmtune export --merge`) and serve the merged folder.

Served with a LoRA adapter, vLLM builds its processor from the base model's folder, not from the adapter's:
a run's model.min_pixels / max_pixels would be lost (images sized by the base's range, 3136 .. 12845056
pixels for Qwen2-VL, where training saw the run's), so they travel as `--mm-processor-kwargs`, which vLLM
hands to the Hugging Face processor (https://github.com/QwenLM/Qwen3-VL/issues/1025,
https://github.com/vllm-project/vllm/issues/15364). A merged or full folder carries the run's processor itself.
"""

from __future__ import annotations

import json
from pathlib import Path

MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vllm/config/lora.py MaxLoRARanks
TOWERS = ("vision", "audio", "projector")


def max_lora_rank(r: int) -> int:
    """The smallest rank vLLM accepts that holds an adapter of rank r."""
    from ..errors import MMTuneError

    for allowed in MAX_LORA_RANKS:
        if allowed >= r:
            return allowed
    raise MMTuneError(f"adapter rank r={r} is above vLLM's largest --max-lora-rank ({MAX_LORA_RANKS[-1]})",
                      where="adapter.r", fix="serve the merged export (mmtune export --merge)")


def lora_problems(adapter_dir: Path, family) -> list[str]:
    """What vLLM's LoRA loader will not load from this PEFT folder (empty: it loads as trained)."""
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    problems = []
    if cfg.get("modules_to_save"):
        problems.append(f"components trained in full (modules_to_save: {', '.join(cfg['modules_to_save'])}) are not "
                        "loaded by vLLM's LoRA loader ('vLLM only supports modules_to_save being None')")
    if cfg.get("use_dora"):
        problems.append("a DoRA adapter: vLLM does not load DoRA")
    if cfg.get("bias", "none") != "none":
        problems.append(f"an adapter bias (bias={cfg['bias']}): vLLM's LoRA loader does not support it")
    if family is not None:
        towers: dict[str, int] = {}
        for name in _lora_module_names(adapter_dir):
            comp = family.component_of(name)
            if comp in TOWERS:
                towers[comp] = towers.get(comp, 0) + 1
        if towers:
            what = ", ".join(f"{n} modules of the {c}" for c, n in sorted(towers.items()))
            problems.append(f"LoRA on {what}: vLLM adds LoRA to the language model only and ignores these, so it "
                            "would answer without that part of the training")
    return problems


def _lora_module_names(adapter_dir: Path) -> set[str]:
    """Module names the adapter's weights attach to, as the model names them (peft's prefix and suffix cut)."""
    from safetensors import safe_open

    path = adapter_dir / "adapter_model.safetensors"
    if not path.is_file():
        return set()
    names = set()
    with safe_open(str(path), "pt") as f:
        for key in f.keys():
            key = key.removeprefix("base_model.model.")
            for marker in (".lora_A", ".lora_B", ".lora_embedding_A", ".lora_embedding_B"):
                if marker in key:
                    names.add(key.split(marker)[0])
    return names


def pixel_kwargs(cfg, media: dict, lora: Path | None) -> dict:
    """The run's image / frame pixel range for vLLM's processor: only beside a LoRA adapter (the base folder's
    processor is the one vLLM loads), only what the run set (unset, the base's default is what training used),
    only for a model that takes images or video."""
    if lora is None or cfg is None or not ({"image", "video"} & set(media)):
        return {}
    return {k: v for k, v in (("min_pixels", cfg.model.min_pixels), ("max_pixels", cfg.model.max_pixels)) if v}


def vllm_command(*, model: str, served_name: str, max_model_len: int | None, media: dict, host: str, port: int,
                 lora: Path | None = None, lora_rank: int | None = None, processor: dict | None = None) -> list[str]:
    """`vllm serve` for a model folder (merged or full) or a base model + one LoRA adapter. The API key is
    not on the command line (other users see it in `ps`): vLLM reads VLLM_API_KEY from the environment."""
    cmd = ["vllm", "serve", model, "--host", host, "--port", str(port)]
    if lora is None:
        cmd += ["--served-model-name", served_name]
    else:
        # Clients ask for the adapter by its name; the base model stays servable under its own.
        cmd += ["--enable-lora", "--lora-modules", f"{served_name}={lora}", "--max-lora-rank",
                str(max_lora_rank(lora_rank or 1))]
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    if media:
        cmd += ["--limit-mm-per-prompt", json.dumps(media, separators=(",", ":"))]
    if processor:
        cmd += ["--mm-processor-kwargs", json.dumps(processor, separators=(",", ":"))]
    return cmd
