"""Names other tools give our settings (transformers' TrainingArguments, LLaMA-Factory, axolotl,
ms-swift), so an unknown key written in another tool's words is answered with ours.

They are hints, not accepted spellings: `num_train_epochs: 3` is an error saying `train.epochs`,
so a config never means two things depending on which name won. docs/config.md lists them.
"""

from __future__ import annotations

# other tool's key (its last segment) -> (our dotted key, the tools that use that name; "" for a plain slip)
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
}


def foreign_key(key: str) -> tuple[str, str] | None:
    """(our key, whose name it is) for a key written in another tool's words, else None."""
    return FOREIGN_KEYS.get(key.split(".")[-1].lower())


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
