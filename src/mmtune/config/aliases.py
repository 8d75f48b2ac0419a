"""Names other tools give our settings (transformers' TrainingArguments, LLaMA-Factory, axolotl,
ms-swift), so an unknown key written in another tool's words is answered with ours.

They are hints, not accepted spellings: `num_train_epochs: 3` is an error saying `train.epochs`,
so a config never means two things depending on which name won. docs/config.md lists them.
"""

from __future__ import annotations

# other tool's key (its last segment) -> (our dotted key, "" where we have none; the tools that use that name,
# "" for a plain slip)
FOREIGN_KEYS: dict[str, tuple[str, str]] = {
    "num_train_epochs": ("train.epochs", "transformers / LLaMA-Factory"),
    "num_epochs": ("train.epochs", "axolotl"),
    "epoch": ("train.epochs", ""),
    "n_epochs": ("train.epochs", ""),
    "warmup_ratio": ("train.warmup_ratio", "transformers"),
    "warmup": ("train.warmup_steps", ""),
    "learning_rate": ("train.lr", "transformers / LLaMA-Factory / axolotl"),
    "per_device_train_batch_size": ("train.micro_batch_size", "transformers / LLaMA-Factory"),
    "micro_batch_size": ("train.micro_batch_size", "axolotl"),
    "batch_size": ("train.micro_batch_size", ""),
    "gradient_accumulation_steps": ("train.grad_accum", "transformers / LLaMA-Factory / axolotl"),
    "lr_scheduler_type": ("train.scheduler", "transformers / LLaMA-Factory"),
    "lr_scheduler": ("train.scheduler", "axolotl"),
    "max_grad_norm": ("train.max_grad_norm", "transformers"),
    "save_steps": ("train.save_every", "transformers / LLaMA-Factory"),
    "save_total_limit": ("train.keep_last", "transformers / LLaMA-Factory"),
    "logging_steps": ("train.log_every", "transformers / LLaMA-Factory"),
    "eval_steps": ("eval.every", "transformers / LLaMA-Factory"),
    "per_device_eval_batch_size": ("eval.batch_size", "transformers / LLaMA-Factory"),
    "metric_for_best_model": ("eval.best_metric", "transformers"),
    "resume_from_checkpoint": ("train.resume", "transformers"),
    "lora_rank": ("adapter.r", "LLaMA-Factory"),
    "lora_r": ("adapter.r", "axolotl"),
    "lora_alpha": ("adapter.alpha", "LLaMA-Factory / axolotl"),
    "lora_dropout": ("adapter.dropout", "LLaMA-Factory / axolotl"),
    "lora_target": ("adapter.target_modules", "LLaMA-Factory"),
    "lora_target_modules": ("adapter.target_modules", "axolotl"),
    "finetuning_type": ("adapter.method", "LLaMA-Factory (lora | full)"),
    "cutoff_len": ("data.max_length", "LLaMA-Factory"),
    "sequence_len": ("data.max_length", "axolotl"),
    "max_seq_length": ("data.max_length", "TRL"),
    "max_length": ("data.max_length", "ms-swift"),
    "dataset": ("data.train", "LLaMA-Factory (with data.dataset_info for its registry)"),
    "eval_dataset": ("data.eval", "LLaMA-Factory"),
    "dataset_dir": ("data.dataset_info", "LLaMA-Factory (the folder holding dataset_info.json)"),
    "image_max_pixels": ("model.max_pixels", "LLaMA-Factory"),
    "image_min_pixels": ("model.min_pixels", "LLaMA-Factory"),
    "video_maxlen": ("model.video_frames", "LLaMA-Factory"),
    "model_name_or_path": ("model.name", "transformers / LLaMA-Factory"),
    "base_model": ("model.name", "axolotl"),
    "bf16": ("train.precision", "transformers (train.precision=bf16)"),
    "fp16": ("train.precision", "transformers (train.precision=fp16)"),
    "seed": ("train.seed", "transformers"),
    # mixed precision: the switches around fp16 / bf16 other tools have (batch 46 in docs/doctor.md)
    "tf32": ("", "transformers / axolotl / LLaMA-Factory"),
    "bf16_full_eval": ("", "transformers"),
    "fp16_full_eval": ("", "transformers"),
    "half_precision_backend": ("train.precision", "transformers"),
    "fp16_opt_level": ("train.precision", "transformers (apex)"),
    "mixed_precision": ("train.precision", "accelerate"),
    # fp8 training and serving switches (batch 50 in docs/doctor.md)
    "fp8": ("train.precision", "LLaMA-Factory / axolotl"),
    "fp8_backend": ("train.precision", "LLaMA-Factory"),
    "fp8_config": ("train.precision", "accelerate"),
    "fp8_enable_fsdp_float8_all_gather": ("train.precision", "LLaMA-Factory / axolotl"),
    "kv_cache_dtype": ("", "vLLM / SGLang"),
    "upcast_layernorm": ("", "LLaMA-Factory"),
    "loss_scale": ("", "DeepSpeed / ms-swift"),
    # adapters: what other tools call peft's options (batch 12 in docs/doctor.md)
    "use_dora": ("adapter.use_dora", "LLaMA-Factory / ms-swift"),
    "peft_use_dora": ("adapter.use_dora", "axolotl"),
    "modules_to_save": ("adapter.train_components", "peft / ms-swift"),
    "additional_target": ("adapter.train_components", "LLaMA-Factory"),
    "lora_modules_to_save": ("adapter.train_components", "axolotl"),
    "use_rslora": ("adapter.alpha", "peft / LLaMA-Factory / ms-swift"),
    "peft_use_rslora": ("adapter.alpha", "axolotl"),
    "adapter_name_or_path": ("train.resume", "LLaMA-Factory"),
    "lora_model_dir": ("train.resume", "axolotl"),
    # keys that carry a decision (batch 26 in docs/doctor.md): "remove it" would silently train another run
    # (no 4-bit base: a QLoRA run turned 16-bit), and difflib's nearest name is a wrong key
    # (evaluation_strategy -> train.strategy, template -> train.grpo.temperature, torch_dtype -> model.factory)
    "load_in_4bit": ("adapter.method", "axolotl / transformers (adapter.method=qlora)"),
    "load_in_8bit": ("adapter.method", "axolotl / transformers (adapter.method=lora8bit)"),
    "quantization_bit": ("adapter.method", "LLaMA-Factory (4: adapter.method=qlora, 8: adapter.method=lora8bit)"),
    "lora_target_linear": ("adapter.target_modules", "axolotl (true: adapter.target_modules=all-linear)"),
    "deepspeed": ("train.strategy", "transformers / LLaMA-Factory / axolotl"),
    "evaluation_strategy": ("eval.every", "transformers"),
    "eval_strategy": ("eval.every", "transformers"),
    "save_strategy": ("train.save_every", "transformers"),
    "torch_dtype": ("train.precision", "transformers"),
    "bnb_4bit_compute_dtype": ("train.precision", "transformers / axolotl"),
    "optim": ("train.optimizer", "transformers / LLaMA-Factory"),
    "stage": ("train.objective", "LLaMA-Factory (sft | dpo; pt is data.format=text; rm has no mmtune objective)"),
    "template": ("", "LLaMA-Factory"),
    "do_train": ("", "transformers / LLaMA-Factory"),
    "report_to": ("logging.wandb", "transformers / LLaMA-Factory"),
    # the loss mask and raw text (batch 38 in docs/doctor.md): difflib answered train_on_inputs with
    # train.save_every_minutes, train_on_prompt with train.loss_impl, mask_prompt with data.system_prompt
    "train_on_inputs": ("", "axolotl / alpaca-lora"),
    "train_on_prompt": ("", "LLaMA-Factory"),
    "mask_prompt": ("", "mlx-lm"),
    "completion_only_loss": ("", "TRL"),
    "assistant_only_loss": ("", "TRL"),
    "dataset_text_field": ("", "TRL"),
    # LoRA initialisations and vocabulary growth (batch 42 in docs/doctor.md): "remove it" hid that they change
    # the base model itself, and difflib answered ms-swift's init_weights with model.weights
    "init_lora_weights": ("", "peft"),
    "peft_init_lora_weights": ("", "axolotl"),
    "init_weights": ("", "ms-swift"),
    "pissa_init": ("", "LLaMA-Factory"),
    "pissa_convert": ("", "LLaMA-Factory"),
    "loftq_config": ("", "peft"),
    "loftq_bits": ("", "peft / LLaMA-Factory"),
    "new_special_tokens": ("", "LLaMA-Factory"),
    "resize_vocab": ("", "LLaMA-Factory"),
    # checkpointing and the cache (batch 47 in docs/doctor.md): difflib answered use_reentrant with "remove it",
    # torch_compile with train.loss_impl and use_cache with model.name, and gradient_checkpointing_kwargs' own
    # choice (use_reentrant: true, the old DDP workaround) went unsaid
    "gradient_checkpointing_kwargs": ("model.gradient_checkpointing", "transformers / TRL / LLaMA-Factory"),
    "use_reentrant": ("model.gradient_checkpointing", "torch / transformers"),
    "fsdp_activation_checkpointing": ("model.gradient_checkpointing", "accelerate"),
    "torch_compile": ("", "transformers / axolotl"),
    "use_cache": ("", "transformers / TRL"),
}

# Keys above whose meaning is not ours one for one: the sentence the error adds after naming our key.
FOREIGN_NOTES: dict[str, str] = {
    "modules_to_save": "components listed there (vision, audio, projector, lm_head) are trained in full and saved "
                       "with the adapter as peft's modules_to_save; embed_tokens is part of the decoder (trained in "
                       "full with adapter.method=full)",
    "use_rslora": "there is no rsLoRA switch: LoRA is scaled by adapter.alpha / adapter.r, so rsLoRA's "
                  "alpha / sqrt(r) is adapter.alpha = alpha * sqrt(r) (r=64, alpha=16: adapter.alpha=128)",
    "adapter_name_or_path": "an adapter is continued by resuming the run that wrote it (the same output_dir, "
                            "train.resume=true: its LoRA weights load trainable, with the optimizer); one from another "
                            "tool: merge it into its base (peft's merge_and_unload) and give that folder as model.name",
    "deepspeed": "a DeepSpeed JSON is not read: train.strategy=zero2 or zero3 builds it (with train.offload=optimizer "
                 "for offload_optimizer), docs/distributed.md",
    "evaluation_strategy": "evaluation is by optimizer steps only: eval.every=N with data.eval set (per epoch: N = "
                           "the steps per epoch the start screen prints); no data.eval means no evaluation",
    "save_strategy": "saving is by optimizer steps (train.save_every=N), and every evaluation saves too",
    "torch_dtype": "the weights load in the run's precision (bf16 | fp16 | fp32), one setting for loading and "
                   "training",
    "template": "the chat template is the model's own (its tokenizer's chat_template); a model without one is "
                "refused by the doctor (MM030), there is no template name to pick",
    "do_train": "`mmtune train` trains; it evaluates where data.eval is set (eval.every)",
    "report_to": "logging.wandb=true / logging.tensorboard=true / logging.mlflow=true, one switch each",
    "train_on_inputs": "the loss is on the answers only (assistant turns, a prompt/completion row's completion, "
                       "each with its end-of-turn token); prompts are context and there is no switch to train them: "
                       "text that should be trained goes in the answer",
    "init_lora_weights": "LoRA starts as peft's default (A random, B zero: step 0 is the base model) and there is no "
                         "other initialisation: PiSSA / OLoRA / LoftQ / EVA rewrite the base weights at start, so "
                         "the adapter they save is right only on that rewritten base unless converted "
                         "(path_initial_model_for_weight_conversion), and mmtune's merge, chat, eval and base "
                         "fingerprint read the base from model.name unchanged. Remove the key (the run is plain LoRA)",
    "new_special_tokens": "the vocabulary is the model folder's own: mmtune neither adds tokens nor resizes the "
                          "embeddings (a token past them is MM065). Add them once outside mmtune (tokenizer.add_tokens, "
                          "model.resize_token_embeddings, save_pretrained both) and give that folder as model.name; "
                          "LoRA leaves the new rows untrained, so train them with adapter.method=full",
    "tf32": "there is no TF32 switch: torch's default is kept (fp32 matmuls in full fp32, TF32 off). On an Ampere or newer "
            "GPU the fast path is train.precision=bf16, every matmul on the tensor cores (MM181 warns about an fp32 run "
            "there); on a T4 / V100 / RTX 20xx there is no TF32 at all",
    "bf16_full_eval": "evaluation runs in the run's own precision (train.precision, the same autocast and weights as "
                      "the training steps), so eval_loss is comparable with the training loss; there is no second dtype "
                      "for evaluation",
    "half_precision_backend": "fp16 is torch's native autocast with a GradScaler (train.precision=fp16); there is no "
                              "apex backend or opt level",
    "mixed_precision": "train.precision=bf16 | fp16 | fp32 is the one precision setting (there is no fp8); an "
                       "accelerate launcher's mixed precision is overridden by it, and the precision decision says so",
    "fp8": "there is no fp8 training (transformer-engine, torchao float8, MS-AMP): weights and matmuls train in "
           "train.precision=bf16 | fp16 | fp32, bf16 the fastest. A checkpoint published in FP8 (Qwen3-*-FP8, "
           "DeepSeek's block FP8) is trained with adapter.method=lora on its own quantized layers (MM040), and "
           "transformers dequantizes it to bf16 at load on a GPU below sm_89 or the CPU",
    "kv_cache_dtype": "an inference server's KV-cache setting: training keeps no KV cache (its forwards pass "
                      "use_cache=False) and `mmtune chat` / eval generate in the run's precision; set it where the "
                      "exported model is served",
    "upcast_layernorm": "norms compute as the model's code writes them (Qwen2's RMSNorm upcasts to fp32 inside); with "
                        "QLoRA the non-quantized weights stay in the compute dtype unless adapter.kbit_upcast=true",
    "loss_scale": "fp16's loss scale is torch's dynamic GradScaler (train.precision=fp16, starting at 65536); the "
                  "skipped updates and the scale are logged (`loss_scale`, summary.json `skipped_updates`), and a "
                  "scale that falls below 1 stops the run under train.nan_guard",
    "gradient_checkpointing_kwargs": "checkpointing is always non-reentrant (use_reentrant=False, with its "
                                     "recomputation context for the planner): LoRA, frozen embeddings, a frozen "
                                     "tower and DDP work with it, where reentrant checkpointing computes no "
                                     "gradients or marks parameters ready twice; model.gradient_checkpointing="
                                     "true | false is the only setting",
    "torch_compile": "the model is not compiled (torch.compile around checkpointed, LoRA-wrapped layers is a "
                     "source of recompilations and CheckpointErrors of its own)",
    "use_cache": "training forwards pass use_cache=False themselves and generation uses the cache; the saved "
                 "config.json keeps the model's own use_cache",
    "dataset_text_field": "raw text is data.format=text (continued pretraining: every token of each document "
                          "trained, an EOS after it); its field is `text`, another is data.columns.text=<field>",
}
for _theirs, _ours in (("additional_target", "modules_to_save"), ("lora_modules_to_save", "modules_to_save"),
                       ("peft_use_rslora", "use_rslora"), ("lora_model_dir", "adapter_name_or_path"),
                       ("eval_strategy", "evaluation_strategy"), ("bnb_4bit_compute_dtype", "torch_dtype"),
                       ("train_on_prompt", "train_on_inputs"), ("mask_prompt", "train_on_inputs"),
                       ("completion_only_loss", "train_on_inputs"), ("assistant_only_loss", "train_on_inputs"),
                       ("peft_init_lora_weights", "init_lora_weights"), ("init_weights", "init_lora_weights"),
                       ("pissa_init", "init_lora_weights"), ("pissa_convert", "init_lora_weights"),
                       ("loftq_config", "init_lora_weights"), ("loftq_bits", "init_lora_weights"),
                       ("resize_vocab", "new_special_tokens"), ("fp16_full_eval", "bf16_full_eval"),
                       ("fp16_opt_level", "half_precision_backend"),
                       ("use_reentrant", "gradient_checkpointing_kwargs"),
                       ("fsdp_activation_checkpointing", "gradient_checkpointing_kwargs")):
    FOREIGN_NOTES[_theirs] = FOREIGN_NOTES[_ours]
for _theirs in ("fp8_backend", "fp8_config", "fp8_enable_fsdp_float8_all_gather"):
    FOREIGN_NOTES[_theirs] = FOREIGN_NOTES["fp8"]


# Another tool's key whose value is one of our settings under another key: (their key, their value) -> (ours,
# what it is). LLaMA-Factory's `stage: pt` is no objective but raw-text data (train.objective=pt would be refused).
FOREIGN_SETTINGS: dict[tuple[str, str], tuple[str, str]] = {
    ("stage", "pt"): ("data.format=text", "LLaMA-Factory's stage pt is continued pretraining on raw text; the "
                                          "loss is the ordinary next-token loss (docs/data.md \"Raw text\")"),
}


def foreign_setting(key: str, value) -> tuple[str, str] | None:
    """(our key=value, what it is) for another tool's key and value that say one of our settings, else None."""
    if not isinstance(value, str):
        return None
    return FOREIGN_SETTINGS.get((key.split(".")[-1].lower(), value.strip().lower()))


def foreign_key(key: str) -> tuple[str, str] | None:
    """(our key, whose name it is) for a key written in another tool's words, else None."""
    return FOREIGN_KEYS.get(key.split(".")[-1].lower())


def foreign_note(key: str) -> str:
    """What to know beyond our key's name when theirs means something else ("" when it is the same setting)."""
    return FOREIGN_NOTES.get(key.split(".")[-1].lower(), "")


# Split names as datasets spell them (failure mode 15: a `val` split where `validation` was expected);
# data/splits.py finds a split under these, first found in this order. Only names that mean the same
# split are aliases: `test` is never read for a validation split (eval picks the best checkpoint, which
# would then be chosen on the test set); a missing split is an error naming the splits there are.
SPLIT_ALIASES = {
    "train": ("train", "training"),
    "eval": ("validation", "val", "valid", "dev", "eval"),
    "test": ("test", "testing"),
}
SPLIT_ALIASES["validation"] = SPLIT_ALIASES["eval"]
SPLIT_ALIASES["val"] = SPLIT_ALIASES["eval"]
SPLIT_ALIASES["dev"] = SPLIT_ALIASES["eval"]
