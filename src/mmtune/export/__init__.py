"""`mmtune export`: a folder that transformers or peft loads.

- adapter runs, no --merge: the PEFT adapter folder (+ processor) -> `PeftModel.from_pretrained(base, DIR)`.
- adapter runs, --merge: base model with LoRA merged in, saved in the run's compute dtype
  -> `<ModelClass>.from_pretrained(DIR)`.
- full runs: the model folder as saved; a run trained under `train.strategy=fsdp` saved its weights as
  shards (`sharded/`, one file per rank): they are gathered here into a `from_pretrained` folder.
The base model is rebuilt from the run's resolved config (config.resolved.yaml), so tiny random
models, local folders and hub ids all export the same way.

The export is written to a temporary folder beside --out and renamed into place, so nothing is
deleted before it is replaced. An existing --out is only replaced when it is empty or an earlier
mmtune export of the same run (its `.mmtune-export.json` says so); --out may never be the run or
checkpoint folder, hold them, or lie inside the run folder elsewhere than the default place
(`<checkpoint>/export`, `<checkpoint>/export-merged`): a user's files are never removed.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from ..errors import MMTuneError
from ..train.checkpoint import resolve_checkpoint
from .origin import MARKER  # the export's marker, read by chat and serve too
from .staging import make_staging, remove_dead_staging
from .template_files import inline_chat_template


def run_config_of(ckpt: Path):
    from ..config import load_config

    for candidate in (ckpt / "config.resolved.yaml", ckpt.parent / "config.resolved.yaml"):
        if candidate.is_file():
            return load_config(candidate, [])
    raise MMTuneError(f"no config.resolved.yaml beside {ckpt}", where=str(ckpt),
                      fix="give a run folder (or its checkpoint) written by mmtune train: it holds config.resolved.yaml")


def export(checkpoint: Path, *, merge: bool = False, out: Path | None = None, push_to_hub: str | None = None,
           private: bool = False) -> Path:
    """The export folder (its marker, `.mmtune-export.json`, holds `kind` and the `notes` a user must read:
    nothing to merge, a processor dependency to install, what vLLM will not load)."""
    if push_to_hub:
        from .hub import check_repo_id

        check_repo_id(push_to_hub)
    ckpt = resolve_checkpoint(Path(checkpoint))
    _refuse_random_weights(ckpt)
    default = ckpt / ("export-merged" if merge else "export")
    out = Path(out) if out else default
    run_dir = _run_dir(ckpt)
    _refuse_unsafe_out(out, ckpt=ckpt, run_dir=run_dir, given=Path(checkpoint))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        from ..console import console
        from ..train.durable import fmt_bytes

        for left, size in remove_dead_staging(out):  # a killed export's (export/staging.py)
            console.print(f"removed {left}, the staging folder of an export that was killed ({fmt_bytes(size)})")
        tmp = make_staging(out)
    except OSError as e:
        raise MMTuneError(f"cannot write beside --out {out} ({e.strerror})", where=str(out.parent),
                          fix="give --out a folder you can write to") from None
    try:
        staged = tmp / "export"
        kind = _kind(ckpt, merge)
        notes = []
        if merge and kind == "full":
            notes.append("nothing to merge: this run trained every weight (adapter.method=full), so the export is "
                         "the model itself, as without --merge")
        notes += _write(ckpt, staged, merge=merge)
        inline_chat_template(staged)  # for servers and GGUF converters that read tokenizer_config.json only
        notes += _explain(staged, ckpt, run_dir, kind, load_path=push_to_hub or str(out.resolve()))
        (staged / MARKER).write_text(json.dumps({"run": str(run_dir.resolve()), "checkpoint": str(ckpt.resolve()),
                                                 "merged": kind == "merged", "kind": kind, "notes": notes}, indent=1))
        _swap_into_place(staged, out, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # our own staging folder only
    if push_to_hub:
        from .hub import push

        push(out, push_to_hub, private=private)
    return out


def _kind(ckpt: Path, merge: bool) -> str:
    """adapter (the PEFT folder), merged (adapter merged into the base) or full (every weight trained)."""
    if (ckpt / "adapter").is_dir() and not (ckpt / "model").is_dir():
        return "merged" if merge else "adapter"
    return "full"


def _explain(out: Path, ckpt: Path, run_dir: Path, kind: str, *, load_path: str) -> list[str]:
    """The model card, and the notes it shares with the command line: whether plain transformers loads the
    processor here, and what vLLM's LoRA loader would not take from an adapter."""
    from .card import processor_problem, write_card
    from .vllm import lora_problems

    notes = []
    problem = processor_problem(out)
    if problem:
        notes.append(problem)
    vllm_notes = []
    if kind == "adapter":
        vllm_notes = [f"vLLM: {p}; serve the merged export instead (mmtune export {run_dir} --merge)"
                      for p in lora_problems(out, _family_of(out))]
        notes += vllm_notes
    try:
        cfg = run_config_of(ckpt)
    except MMTuneError:
        return notes  # no config beside it: nothing to write a card from
    write_card(out, kind=kind, cfg=cfg, run_dir=run_dir, ckpt=ckpt, load_path=load_path, processor_note=problem,
               vllm_notes=vllm_notes)
    return notes


def _family_of(adapter_dir: Path):
    from ..models.families import FAMILIES

    try:
        cls = (json.loads((adapter_dir / "adapter_config.json").read_text()).get("auto_mapping") or {}).get(
            "base_model_class")
    except (OSError, ValueError):
        return None
    return next((f for f in FAMILIES.values() if f.model_class == cls), None)


def _run_dir(ckpt: Path) -> Path:
    """The run folder a checkpoint belongs to (where config.resolved.yaml lies), else the checkpoint itself."""
    return ckpt.parent if (ckpt.parent / "config.resolved.yaml").is_file() else ckpt


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _refuse_unsafe_out(out: Path, *, ckpt: Path, run_dir: Path, given: Path) -> None:
    """--out that would overwrite the run, or a folder that is not ours to replace, is an error before
    anything is written."""
    o = out.resolve()
    protected = {p.resolve() for p in (ckpt, run_dir, given)}
    defaults = {(ckpt / "export").resolve(), (ckpt / "export-merged").resolve()}
    fix_other = "give --out a new or empty folder outside the run folder (or leave --out out: <checkpoint>/export)"
    for p in protected:
        if _inside(p, o):
            raise MMTuneError(f"--out {out} is the run folder or holds it ({p}): exporting there would overwrite the run",
                              where=f"--out {out}", fix=fix_other)
    if o not in defaults and _inside(o, run_dir.resolve()):
        raise MMTuneError(f"--out {out} lies inside the run folder {run_dir}, where a new run or checkpoint rotation "
                          "would delete it", where=f"--out {out}", fix=fix_other)
    if not out.exists():
        return
    if not out.is_dir():
        raise MMTuneError(f"--out {out} exists and is a file", where=f"--out {out}", fix=fix_other)
    if not any(out.iterdir()):
        return
    marker = out / MARKER
    if marker.is_file():
        try:
            previous = json.loads(marker.read_text()).get("run")
        except (OSError, ValueError, AttributeError):
            previous = None
        if previous == str(run_dir.resolve()):
            return  # an earlier export of this same run: replaced once the new one is complete
        raise MMTuneError(f"--out {out} holds an mmtune export of another run ({previous})", where=str(marker),
                          fix="give --out a new folder, or delete that export yourself if it is no longer needed")
    if o in defaults and ((out / "adapter_config.json").is_file() or (out / "config.json").is_file()):
        return  # an export at the default place written before exports carried their marker
    raise MMTuneError(f"--out {out} already exists and holds files that are not an export of this run; "
                      "nothing was written or deleted", where=f"--out {out}",
                      fix="give --out a new or empty folder, or move those files away yourself")


def _swap_into_place(staged: Path, out: Path, tmp: Path) -> None:
    """The complete export replaces the earlier one only now; the earlier one (checked to be ours) goes last."""
    if out.exists():
        old = tmp / "previous"
        out.rename(old)
        try:
            staged.rename(out)
        except OSError:
            old.rename(out)  # put the earlier export back rather than leave nothing
            raise
    else:
        staged.rename(out)


def _write(ckpt: Path, out: Path, *, merge: bool) -> list[str]:
    """The export written into `out`; returns the notes it needs (a merge that had to untie weights)."""
    if (ckpt / "model").is_dir():
        shutil.copytree(ckpt / "model", out)
        return []
    if not (ckpt / "adapter").is_dir():
        _gather_full_model(ckpt, out)
        return []
    if not merge:
        _same_base(ckpt)  # the adapter's card names model.name as its base
        shutil.copytree(ckpt / "adapter", out)
        bare = bare_trained_names(ckpt)
        return [f"trained in full but not part of a PEFT adapter folder: {', '.join(bare)} (an nn.Parameter outside "
                "any module peft can save); PeftModel.from_pretrained gives the base's values there: export with "
                "--merge to keep them (mmtune chat / eval on the checkpoint read them)"] if bare else []
    from peft import PeftModel

    from ..build import load_model
    from ..resolve import local_target, resolve_run

    cfg = run_config_of(ckpt)
    if cfg.adapter.method in ("qlora", "lora8bit"):
        # Merging into 4-bit / int8 weights would round the update away; merge into the compute dtype instead.
        cfg = cfg.model_copy(update={"adapter": cfg.adapter.model_copy(update={"method": "lora"})})
    from ..console import TaskBar

    with TaskBar("export: base model, adapter, merge, save", 4) as bar:
        resolved = resolve_run(cfg, local_target("cpu"), for_training=True)  # merged on the CPU, in the compute dtype
        dtype = resolved.compute_dtype
        loaded = load_model(resolved, device="cpu")
        bar.advance()
        from .prequantized import dequantize_base

        notes = dequantize_base(loaded.model, dtype, cfg.model.name, ckpt)
        notes += untie_trained_embeddings(loaded.model, ckpt / "adapter")
        try:
            model = PeftModel.from_pretrained(loaded.model, str(ckpt / "adapter"))
        except RuntimeError as e:  # peft's load_state_dict: "size mismatch for ... copying a param with shape"
            if "size mismatch" not in str(e):
                raise
            from ..train.checkpoint import base_changed

            raise base_changed(ckpt, cfg.model.name, _first_mismatch(str(e))) from None
        _same_base(ckpt)  # shapes that fit say nothing of the values (after peft's load: its shape message first)
        load_bare_trained(model, ckpt)
        bar.advance()
        merged = model.merge_and_unload()
        merged.to(dtype)
        bar.advance()
        merged.save_pretrained(str(out), safe_serialization=True)
        if loaded.processor is not None and hasattr(loaded.processor, "save_pretrained"):
            loaded.processor.save_pretrained(str(out))
        bar.advance()
    return notes


def bare_trained_names(ckpt: Path, *, full: bool = False) -> list[str]:
    """Names in the checkpoint's trainable.safetensors that are neither LoRA weights nor a modules_to_save copy
    (without `full`: as the base model names them)."""
    path = ckpt / "trainable.safetensors"
    if not path.is_file():
        return []
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        names = [n for n in f.keys() if not re.search(r"\.lora_|\.modules_to_save\.|\.original_module\.", n)]
    return names if full else [n.removeprefix("base_model.model.") for n in names]


def load_bare_trained(model, ckpt: Path) -> list[str]:
    """The tensors trained in full that the PEFT adapter folder cannot hold (adapters._bare_parameters: LLaVA-NeXT's
    `image_newline` when the projector is trained), copied from the checkpoint's trainable.safetensors onto the
    peft-wrapped `model` before the merge. Returns their names."""
    import torch
    from safetensors import safe_open

    params = dict(model.named_parameters())
    names = [n for n in bare_trained_names(ckpt, full=True) if n in params]
    if not names:
        return []
    with safe_open(str(ckpt / "trainable.safetensors"), "pt") as f:
        with torch.no_grad():
            for n in names:
                params[n].copy_(f.get_tensor(n).to(params[n].dtype))
    return names


def untie_trained_embeddings(model, adapter_dir: Path) -> list[str]:
    """A base whose lm_head is its input embedding matrix (tie_word_embeddings, e.g. Qwen2-VL-2B, Qwen2.5-VL-3B)
    and an adapter that changes one of the two (LoRA on lm_head, lm_head or the embeddings
    trained in full): training changed one side only, but merging into the one shared matrix changes both, and
    a merged folder saved as tied keeps one of them (https://github.com/huggingface/transformers/issues/45127).
    Here lm_head gets a copy of its own before the adapter is merged, and the config says the two are apart,
    so the merged model computes what was trained. Returns the note saying so (empty: nothing to untie)."""
    import torch

    inp, outp = model.get_input_embeddings(), model.get_output_embeddings()
    w_in, w_out = getattr(inp, "weight", None), getattr(outp, "weight", None)
    if w_in is None or w_out is None or w_in.data_ptr() != w_out.data_ptr():
        return []
    names = [n for n, m in model.named_modules() if n and (m is inp or m is outp)]
    touched = sorted({n for n in names for k in _adapter_keys(adapter_dir)
                      if k.removeprefix("base_model.model.").startswith(n + ".")})
    if not touched:
        return []  # the adapter leaves both alone: the merged model may stay tied
    outp.weight = torch.nn.Parameter(w_out.detach().clone(), requires_grad=False)
    for c in {id(c): c for c in (model.config, model.config.get_text_config())}.values():
        if hasattr(c, "tie_word_embeddings"):
            c.tie_word_embeddings = False
    return [f"the base model ties lm_head to the input embeddings (tie_word_embeddings) and the adapter changes "
            f"{', '.join(touched)}: the merged model stores the two apart (tie_word_embeddings=false), as they "
            "were trained, so it is larger than the base by one embedding matrix"]


def _adapter_keys(adapter_dir: Path) -> list[str]:
    from safetensors import safe_open

    path = adapter_dir / "adapter_model.safetensors"
    if not path.is_file():
        return []
    with safe_open(str(path), "pt") as f:
        return list(f.keys())


def _first_mismatch(text: str) -> str:
    """peft's first 'size mismatch for NAME: copying a param with shape A from checkpoint, the shape in current
    model is B', shortened to 'NAME: saved (..), the base model (..)'."""
    import re

    m = re.search(r"size mismatch for ([^:]+): copying a param with shape torch\.Size\(\[([^\]]*)\]\) from "
                  r"checkpoint, the shape in current model is torch\.Size\(\[([^\]]*)\]\)", text)
    if not m:
        return text.strip().splitlines()[-1][:200]
    return f"{m.group(1)}: saved ({m.group(2)}), the base model ({m.group(3)})"


def _same_base(ckpt: Path) -> None:
    """The weight files at the run's model.name are still the ones it trained on (train/checkpoint.py
    check_base_weights: same shapes, other values, is otherwise silent)."""
    from ..train.checkpoint import check_base_weights

    try:
        cfg = run_config_of(ckpt)
    except MMTuneError:
        return  # no resolved config beside it: nothing names the base
    check_base_weights(ckpt, cfg.model.name)


def _refuse_random_weights(ckpt: Path) -> None:
    """A run trained on random weights (model.weights=random: a memory/speed measurement) exported would read as
    a fine-tuned model; refused, whatever the checkpoint holds."""
    try:
        cfg = run_config_of(ckpt)
    except MMTuneError:
        return  # no resolved config beside it: nothing says how it was trained (the paths below need none)
    if cfg.model.weights == "random":
        raise MMTuneError(f"{ckpt} was trained from random weights (model.weights=random): a measurement of memory "
                          "and speed, not a model to export", where=f"{ckpt}: model.weights",
                          fix="train with the pretrained weights (model.weights=pretrained, the default) to export")


def _gather_full_model(ckpt: Path, out: Path) -> Path:
    """A full fine-tune saved as shards: the base model rebuilt from the run's config, the trained
    weights read from the shards onto it (torch.distributed.checkpoint reshards to one process), saved."""
    from ..build import build_model_and_adapters
    from ..resolve import local_target, resolve_run
    from ..train.checkpoint import load_trainable
    from ..train.sharded_checkpoint import has_sharded

    if not has_sharded(ckpt):
        raise MMTuneError(f"{ckpt} holds neither model/, adapter/ nor sharded weights", where=str(ckpt),
                          fix="export a checkpoint written by mmtune train")
    cfg = run_config_of(ckpt)
    resolved = resolve_run(cfg, local_target("cpu"), for_training=True)
    loaded, adapters = build_model_and_adapters(resolved, device="cpu")
    model = adapters.model
    load_trainable(model, ckpt, strict=False, base=cfg.model.name)
    model.to(resolved.compute_dtype)
    model.save_pretrained(str(out), safe_serialization=True)
    if loaded.processor is not None and hasattr(loaded.processor, "save_pretrained"):
        loaded.processor.save_pretrained(str(out))
    return out
