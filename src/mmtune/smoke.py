"""`--smoke`: run a recipe end to end through a tiny random twin of its own architecture.

Same data pipeline, adapters, loss, eval and checkpointing; only the model's dimensions shrink and the
run is cut to a few steps on the CPU. This is how a recipe is tested on a laptop before a GPU is rented.
"""

from __future__ import annotations

from .config.schema import RunConfig


def smoke_config(cfg: RunConfig, steps: int = 3) -> tuple[RunConfig, list[str]]:
    from .models.families import get_family
    from .models.tiny import is_tiny, tiny_spec

    notes = []
    data = cfg.model_dump()
    twin = cfg.model.name
    if cfg.model.class_ or cfg.model.factory:  # a brought model: its factory decides its size (docs/byo_model.md)
        notes.append(f"model {cfg.model.factory or cfg.model.class_}({cfg.model.name!r}) as configured: a brought "
                     "model has no tiny twin; give model.name a small size for a smoke run")
    elif not is_tiny(cfg.model.name):
        from .models.smoke_twin import smoke_twin

        twin = smoke_twin(cfg.model.name, family=cfg.model.family)
        notes.append(f"model {cfg.model.name} -> tiny twin {twin} (same model class, shrunk dimensions)")
        data["model"]["name"] = twin
    if not cfg.data.train:
        # A recipe written for planning may name no data; the smoke run still needs records.
        modalities = get_family(tiny_spec(twin).family).modalities
        synthetic = "synthetic:counting" if "image" in modalities else "synthetic:arithmetic"
        data["data"].update(train=synthetic, eval=synthetic)
        notes.append(f"no data.train in the recipe -> {synthetic} for the smoke run")
    data["output_dir"] = cfg.output_dir.rstrip("/") + "-smoke"
    t = data["train"]
    t.update(max_steps=min(t["max_steps"] or steps, steps), epochs=None, micro_batch_size=min(t["micro_batch_size"], 2),
             grad_accum=min(t["grad_accum"], 2), device="cpu", num_workers=0, resume=False,
             warmup_steps=min(t["warmup_steps"] or 0, 1), warmup_ratio=None, save_every=None, gpu=None)
    # GRPO samples G completions per prompt: the twin's smoke run samples fewer and shorter ones (as eval's
    # max_new_tokens is cut below), enough to run every part of the step.
    g = t["grpo"]
    g.update(generations=min(g["generations"], 2), max_completion_length=min(g["max_completion_length"], 8))
    if t["precision"] != "fp32":
        notes.append(f"precision {t['precision']} -> fp32 (CPU)")
        t["precision"] = "fp32"
    # Liger's kernels are Triton (CUDA only), refused for a run on this CPU: the twin runs the torch paths
    # (the chunked loss is what train.loss_impl=liger is planned as).
    if t["fused_kernels"] == "liger":
        notes.append("train.fused_kernels liger -> none (CPU: Liger's kernels are CUDA only)")
        t["fused_kernels"] = "none"
    if t["loss_impl"] == "liger":
        notes.append("train.loss_impl liger -> chunked (CPU: Liger's fused cross entropy is CUDA only; the chunked "
                     "loss is its torch twin)")
        t["loss_impl"] = "chunked"
    if t["optimizer"] in ("adamw_8bit", "paged_adamw_8bit", "paged_adamw"):
        notes.append(f"{t['optimizer']} -> adamw (CPU)")
        t["optimizer"] = "adamw"
    e = data["eval"]
    e.update(every=None, max_new_tokens=min(e["max_new_tokens"], 8), batch_size=min(e["batch_size"], 2))
    data["data"]["eval_max_samples"] = min(data["data"]["eval_max_samples"] or 4, 4)
    data["data"]["synthetic_train_size"] = min(data["data"]["synthetic_train_size"], 16)
    if data["data"].get("mixture_size"):  # a mixture's epoch: every sample is encoded before step 1
        data["data"]["mixture_size"] = min(data["data"]["mixture_size"], 16)
    data["data"]["synthetic_eval_size"] = min(data["data"]["synthetic_eval_size"], 4)
    data["logging"].update(wandb=False, mlflow=False)
    data["model"]["attn_implementation"] = "sdpa" if data["model"]["attn_implementation"] == "flash_attention_2" \
        else data["model"]["attn_implementation"]
    return RunConfig.model_validate(data), notes
