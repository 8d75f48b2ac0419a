"""Broken setups from the nineteenth batch of public bug reports (docs/doctor.md, "Public bug reports, batch 19:
training the vision tower and the projector"): LLaVA's two stages (projector pretraining, then LoRA with the
projector), the projector saved beside a LoRA adapter, Qwen2-VL's merger and Qwen3-VL's DeepStack mergers as the
projector, and a frozen tower under gradient checkpointing. Rebuilt on tiny twins trained for real; the miss is
fixed (the two-stage recipe could not reach its stage 2), the rest pinned.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp: Path, name: str, model_name, adapter: dict, **model):
    from mmtune.config import load_config

    tree = {"output_dir": str(tmp / name), "model": {"name": str(model_name), "gradient_checkpointing": True, **model},
            "data": {"train": "synthetic:counting", "synthetic_train_size": 8}, "adapter": adapter,
            "train": {"max_steps": 2, "micro_batch_size": 2, "grad_accum": 1, "lr": 1e-3, "precision": "fp32",
                      "device": "cpu", "warmup_steps": 0, "seed": 0, "save_every": 2},
            "eval": {"every": None}, "logging": {"tensorboard": False}}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tree))
    return load_config(path, [])


def _train(cfg):
    from mmtune.build import build_run
    from mmtune.train.loop import train

    run = build_run(cfg)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        train(run)
    return run, [str(w.message) for w in seen]


# The seed-004 pair as a user runs it: stage 1 (projector only: full method, everything else frozen), then stage 2
# (LoRA on the LM, the projector trained in full, CLIP frozen) from stage 1's model. Trained once for the tests below.
STAGE1 = {"method": "full", "freeze_components": ["vision", "decoder", "lm_head"]}
STAGE2 = {"method": "lora", "r": 4, "dropout": 0.0, "train_components": ["projector"], "freeze_components": ["vision"],
          "lr_multipliers": {"projector": 0.5}}


@pytest.fixture(scope="module")
def stage1(tmp_path_factory):
    from mmtune.models.tiny import build_tiny

    tmp = tmp_path_factory.mktemp("llava")
    model, proc = build_tiny("tiny/llava")
    model.save_pretrained(tmp / "composed")
    proc.save_pretrained(tmp / "composed")
    run, seen = _train(_config(tmp, "stage1", tmp / "composed", STAGE1))
    trained = {n.split("multi_modal_projector.")[1]: p.detach().clone()
               for n, p in run.unwrapped_model().named_parameters() if "multi_modal_projector" in n}
    return tmp, trained, seen


# ----------------------------------------------------------------------------- stage 2 from stage 1's model
# https://github.com/haotian-liu/LLaVA/issues/665, https://github.com/haotian-liu/LLaVA/issues/474,
# https://github.com/LLaVA-VL/LLaVA-NeXT/issues/177, https://github.com/alibaba/conv-llava/issues/9: stage 2 cannot
# load stage 1's projector (size mismatch, "shape in current model is torch.Size([0])" under ZeRO-3, or it is not
# clear where stage 1's projector is). mmtune's stage 2 starts from stage 1's model folder, but the seed-004 stage-2
# recipe named `runs/seed004_llava_clip/stage1/final`, a folder nothing writes (`mmtune export` refuses an --out
# inside the run folder), and the error's fix was "save_pretrained". Now the error names the export command.

def test_stage2_naming_a_folder_inside_stage1s_run_says_how_to_export_it(stage1):
    from mmtune.build import build_run
    from mmtune.errors import ModelLoadError

    tmp, _, _ = stage1
    run_dir = tmp / "stage1"
    for name in (run_dir / "final", run_dir):  # the recipe's old path, and the run folder itself
        with pytest.raises(ModelLoadError) as e:
            build_run(_config(tmp, "stage2-broken", name, STAGE2))
        assert f"mmtune run folder {run_dir}" in e.value.what, e.value.what
        assert f"mmtune export {run_dir} --out {tmp / 'stage1-final'}" in e.value.fix, e.value.fix
        assert "--merge" not in e.value.fix  # stage 1 trained the full model: nothing to merge


def test_stage2_from_the_exported_stage1_starts_from_its_trained_projector(stage1):
    import torch

    from mmtune.build import build_run
    from mmtune.export import export

    tmp, trained, _ = stage1
    out = export(tmp / "stage1", out=tmp / "stage1-final")  # the command the fix names
    run = build_run(_config(tmp, "stage2", out, STAGE2))
    loaded = {n.split("multi_modal_projector.")[1].replace("modules_to_save.default.", ""): p
              for n, p in run.unwrapped_model().named_parameters()
              if "multi_modal_projector" in n and "original_module" not in n}
    assert loaded.keys() == trained.keys()
    for k, p in loaded.items():
        torch.testing.assert_close(p.float(), trained[k].float())


def test_the_seed004_recipes_chain_through_an_export_outside_the_stage1_run():
    s1 = yaml.safe_load((ROOT / "recipes/seed004_llava_clip_stage1.yaml").read_text())
    s2 = yaml.safe_load((ROOT / "recipes/seed004_llava_clip_stage2.yaml").read_text())
    run_dir, model = Path(s1["output_dir"]), Path(s2["model"]["name"])
    assert run_dir not in model.parents and model != run_dir  # export refuses an --out inside the run folder
    text = (ROOT / "recipes/seed004_llava_clip_stage1.yaml").read_text()
    assert f"mmtune export {run_dir} --out {model}" in text


# ----------------------------------------------------------------------------- the projector beside a LoRA adapter
# https://github.com/haotian-liu/LLaVA/issues/1592, https://github.com/haotian-liu/LLaVA/issues/852,
# https://github.com/haotian-liu/LLaVA/issues/1373, https://github.com/haotian-liu/LLaVA/issues/784: after LoRA
# with mm_projector_lr the projector is not in the adapter (mm_projector.bin missing, or non_lora_trainables.bin only
# at the end); loading the adapter on the base leaves the projector "newly initialized". In mmtune the projector
# trained beside LoRA is a peft modules_to_save: it is in adapter_model.safetensors, and the merge writes it.

def test_projector_trained_beside_lora_is_in_the_adapter_and_the_merge(stage1):
    import json

    import torch
    from safetensors.torch import load_file

    from mmtune.export import export

    tmp, _, _ = stage1
    if not (tmp / "stage1-final").is_dir():
        export(tmp / "stage1", out=tmp / "stage1-final")
    run, seen = _train(_config(tmp, "stage2-train", tmp / "stage1-final", STAGE2))
    trained = {n.split("modules_to_save.default.")[1]: p.detach().float()
               for n, p in run.unwrapped_model().named_parameters() if "multi_modal_projector.modules_to_save" in n}
    assert len(trained) == 4
    # LLaVA's mm_projector_lr (https://github.com/haotian-liu/LLaVA/issues/948): adapter.lr_multipliers, its own group
    lrs = {g["component"]: g["lr"] for g in run.param_groups if g["params"]}
    assert lrs["projector"] == pytest.approx(0.5 * run.cfg.train.lr) and lrs["lora"] == pytest.approx(run.cfg.train.lr)
    ad = export(Path(run.cfg.output_dir), out=tmp / "stage2-adapter")
    assert json.loads((ad / "adapter_config.json").read_text())["modules_to_save"] == ["model.multi_modal_projector"]
    saved = load_file(ad / "adapter_model.safetensors")
    merged = load_file(export(Path(run.cfg.output_dir), merge=True) / "model.safetensors")
    for k, p in trained.items():
        torch.testing.assert_close(saved[f"base_model.model.model.multi_modal_projector.{k}"].float(), p)
        torch.testing.assert_close(merged[f"multi_modal_projector.{k}"].float(), p)
    # https://github.com/2U1/Llama3.2-Vision-Finetune/issues/27, https://github.com/2U1/Qwen-VL-Series-Finetune/issues/56:
    # a frozen tower under gradient checkpointing warns "None of the inputs have requires_grad=True" (reentrant
    # checkpointing); mmtune's is non-reentrant and only the text embeddings' output is made to require grad
    assert not any("None of the inputs have requires_grad" in m for m in seen), seen


# ----------------------------------------------------------------------------- Qwen-VL mergers are the projector
# https://github.com/modelscope/ms-swift/issues/2773, https://github.com/modelscope/ms-swift/issues/4722,
# https://github.com/hiyouga/LlamaFactory/issues/8334 (Qwen2-VL: train the merger only; LoRA leaves the merger
# frozen), https://github.com/hiyouga/LlamaFactory/pull/9399 (Qwen3-VL's DeepStack mergers trained, or given LoRA,
# while the tower was meant frozen).

@pytest.mark.parametrize("tiny", ["tiny/qwen2-vl", "tiny/qwen3-vl"])
def test_qwen_vl_mergers_are_the_projector_the_tower_stays_frozen(tiny):
    from mmtune.adapters import apply_adapters, base_name
    from mmtune.config.schema import RunConfig
    from mmtune.models.families import family_for_config
    from mmtune.models.tiny import build_tiny

    for adapter, merger_trained in (({"method": "lora", "r": 4}, False),
                                    ({"method": "lora", "r": 4, "train_components": ["projector"],
                                      "freeze_components": ["vision"]}, True)):
        model, _ = build_tiny(tiny)
        family = family_for_config(model.config)
        cfg = RunConfig(model={"name": tiny}, adapter=adapter)
        res = apply_adapters(model, family, cfg.adapter, cfg.train)
        visual = [base_name(n) for n, p in res.model.named_parameters()
                  if p.requires_grad and base_name(n).startswith("model.visual.")]
        assert all(".merger." in n or "deepstack_merger_list" in n for n in visual), visual  # no tower, no LoRA
        assert bool(visual) == merger_trained
        if merger_trained and tiny == "tiny/qwen3-vl":
            assert any("deepstack_merger_list" in n for n in visual)


# ----------------------------------------------------------------------------- a frozen tower's train mode
# https://github.com/pgniewko/gt-pyg/issues/112, https://github.com/ultralytics/ultralytics/pull/8753,
# https://github.com/pytorch/pytorch/issues/66073: a frozen encoder put back into train mode by model.train(): its
# BatchNorm statistics drift to the fine-tuning batches and its dropout stays on, so features differ from
# inference. mmtune froze by requires_grad only, and the loop's model.train() ran a frozen CLIP tower with its
# attention dropout (here 0.3) on every step. Now frozen components keep eval mode through any train() call.

def _tower_twice(run, batch):
    import torch

    tower = next(m for n, m in run.model.named_modules() if n.endswith("model.vision_tower"))
    with torch.no_grad():
        return [tower(batch["pixel_values"]).last_hidden_state for _ in range(2)], tower


@pytest.mark.parametrize("adapter,frozen", [({"method": "lora", "r": 4}, True),
                                            ({"method": "lora", "r": 4, "train_components": ["vision"]}, False)])
def test_a_frozen_tower_with_dropout_runs_in_eval_mode_under_model_train(tmp_path, adapter, frozen):
    import torch

    from mmtune.build import build_run
    from mmtune.models.examples import example_batch
    from mmtune.models.tiny import build_tiny

    model, proc = build_tiny("tiny/llava")
    model.config.vision_config.attention_dropout = 0.3
    model.save_pretrained(tmp_path / "m")
    proc.save_pretrained(tmp_path / "m")
    run = build_run(_config(tmp_path, "run", tmp_path / "m", adapter), with_data=False)
    run.model.train()  # what the loop does at its start and after each evaluation
    (a, b), tower = _tower_twice(run, example_batch(proc, ("image",)))
    assert tower.training is (not frozen)
    assert torch.equal(a, b) is frozen  # frozen: the same features every pass, as at inference
    lines = [d for d in run.decisions if d.startswith("frozen vision: kept in eval mode")]
    assert bool(lines) is frozen and (not lines or "dropout 0.3" in lines[0]), run.decisions
    decoder_lora = [m for n, m in run.model.named_modules() if n.endswith("language_model.layers.0.self_attn.q_proj")]
    assert decoder_lora and decoder_lora[0].training  # the LoRA-hosting decoder trains as before


def test_a_frozen_decoder_behind_a_trained_projector_keeps_train_mode_for_checkpointing(tmp_path):
    """LLaVA stage 1 (only the projector trains): the gradient crosses the frozen decoder on its way to the projector,
    and transformers recomputes a checkpointed layer only in train mode; pinned in eval mode, the decoder would keep
    every layer's activations. Only what lies before every trained component (the tower) is pinned."""
    from mmtune.build import build_run
    from mmtune.models.tiny import build_tiny

    model, proc = build_tiny("tiny/llava")
    model.config.vision_config.attention_dropout = 0.3
    model.save_pretrained(tmp_path / "m")
    proc.save_pretrained(tmp_path / "m")
    adapter = {"method": "full", "freeze_components": ["vision", "decoder", "lm_head"]}
    run = build_run(_config(tmp_path, "run", tmp_path / "m", adapter), with_data=False)
    run.model.train()
    layers = [m for n, m in run.model.named_modules() if n.endswith("language_model.layers.0")]
    tower = next(m for n, m in run.model.named_modules() if n.endswith("model.vision_tower"))
    assert layers and layers[0].training and layers[0].gradient_checkpointing
    assert not tower.training
