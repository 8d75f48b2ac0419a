"""Public bug reports, batch 22: text-only model families beyond Qwen (Llama 3.x, Gemma 2/3, Phi-3/4, Mistral /
Mixtral, OLMo-2), rebuilt on tiny random folders of those transformers classes with the local tokenizer
(docs/doctor.md, "Public bug reports, batch 22")."""

from __future__ import annotations

import json

import pytest
import yaml


def _text_folder(folder, model_type: str, **arch):
    """A tiny random causal LM of `model_type`, saved as a hub checkout is (config, weights, tokenizer)."""
    import torch
    import transformers

    from mmtune.models.local_tokenizer import make_tokenizer
    from mmtune.models.tiny import TEXT

    tok = make_tokenizer()
    kw = dict(TEXT, vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
              bos_token_id=None, **arch)
    config = transformers.CONFIG_MAPPING[model_type](**kw)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, tok


def _zero_rows(folder, token_id: int):
    """The rows of `token_id` in embed_tokens and lm_head set to zero: a base checkpoint whose pretraining never
    used that token (Llama 3 base's <|eot_id|>)."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    sd = load_file(path)
    for k, v in sd.items():
        if k.endswith(("embed_tokens.weight", "lm_head.weight")):
            v[token_id] = 0
    save_file(sd, path, metadata={"format": "pt"})


def _cfg(tmp_path, folder, method="lora", **train):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"What is {i}+1?"},
                                                     {"role": "assistant", "content": str(i + 1)}]}) + "\n"
                            for i in range(4)))
    tree = {"model": {"name": str(folder)}, "data": {"train": str(data), "max_length": 64},
            "adapter": {"method": method}, "output_dir": str(tmp_path / "run"),
            "train": {"device": "cpu", "precision": "fp32", **train}}
    path = tmp_path / f"{method}.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


# ------------------------------------------------------------------ untrained template tokens (Llama 3 base): MM223

@pytest.fixture(scope="module")
def llama_base(tmp_path_factory):
    """A tiny Llama whose turn-end token (<|im_end|> in the local tokenizer, <|eot_id|> in Llama 3) has zero rows."""
    folder, tok = _text_folder(tmp_path_factory.mktemp("llama") / "base", "llama")
    _zero_rows(folder, tok.convert_tokens_to_ids("<|im_end|>"))
    return folder


def _mm223(tmp_path, folder, method="lora"):
    from mmtune.doctor.runner import run_doctor

    return run_doctor(_cfg(tmp_path, folder, method), [], None, only=["MM223"])


def test_lora_on_a_base_model_whose_turn_end_row_is_untrained_is_an_error(tmp_path, llama_base):
    """torchtune#2429 / unsloth#658: a Llama 3 base fine-tuned with the Llama 3 chat template under LoRA: the
    answers end with <|eot_id|>, whose lm_head row is ~zero and frozen, so the model does not learn to stop."""
    rep = _mm223(tmp_path, llama_base)
    assert [(f.code, f.severity) for f in rep.findings] == [("MM223", "error")], (rep.findings, rep.not_run)
    msg = rep.findings[0].message
    assert "'<|im_end|>'" in msg and "does not learn to stop" in msg and "instruct" in rep.findings[0].fix


def test_train_stops_at_start_on_an_untrained_turn_end_row(tmp_path, llama_base):
    """MM223 is one of the checks `mmtune train` runs before starting: the run that would never learn to stop is
    not started (no hour of GPU time spent to find it at the first generation)."""
    from typer.testing import CliRunner

    from mmtune.cli import app

    r = CliRunner().invoke(app, ["train", str(_cfg(tmp_path, llama_base)), "train.max_steps=1"])
    assert r.exit_code == 2, r.output
    assert "MM223" in r.output and "the run was not started" in r.output
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_full_training_of_untrained_template_rows_is_an_info(tmp_path, llama_base):
    rep = _mm223(tmp_path, llama_base, method="full")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM223", "info")], (rep.findings, rep.not_run)


def test_mm223_is_silent_on_a_checkpoint_whose_template_tokens_are_trained(tmp_path):
    folder, _ = _text_folder(tmp_path / "instruct", "llama")
    rep = _mm223(tmp_path, folder)
    assert rep.findings == [] and not rep.not_run, (rep.findings, rep.not_run)


# ------------------------------------------------------------------ Gemma 3 in fp16: MM041 reads the decoder's type

def test_gemma3_in_fp16_on_a_t4_is_warned(doctor):
    """transformers#36822 / unsloth#2040: Gemma 3 overflows in fp16 (NaN loss from the first step on a V100/T4).
    The run's own switch to fp16 on a T4 (no bf16) is flagged for the VLM and for a day-0 gemma3_text folder."""
    rep = doctor({"model": {"name": "google/gemma-3-4b-it"}}, "MM041", gpu="t4")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM041", "warning")], (rep.findings, rep.not_run)
    assert "gemma3_text decoder" in rep.findings[0].message and "transformers#36822" in rep.findings[0].message


def test_a_day0_gemma3_text_folder_in_fp16_is_warned(doctor, tmp_path):
    folder, _ = _text_folder(tmp_path / "g3", "gemma3_text", head_dim=16, query_pre_attn_scalar=16,
                             sliding_window=16)
    rep = doctor({"model": {"name": str(folder)}, "train": {"precision": "fp16"}}, "MM041", gpu="t4")
    assert [(f.code, f.severity) for f in rep.findings] == [("MM041", "warning")], (rep.findings, rep.not_run)
    assert "generic:gemma3_text's gemma3_text decoder" in rep.findings[0].message


def test_mm041_silent_for_gemma3_in_bf16_and_for_an_unreported_decoder(doctor):
    assert doctor({"model": {"name": "google/gemma-3-4b-it"}}, "MM041", gpu="a100-80gb").findings == []
    assert doctor({"model": {"name": "google/gemma-2-9b"}}, "MM041", gpu="t4").findings == []


# ------------------------------------------------------------------ a rows: day-0 MoE and OLMo-2 LoRA targets

@pytest.mark.parametrize("model_type, arch, targets, experts", [
    ("mixtral", dict(num_local_experts=4, num_experts_per_tok=2),
     ("q_proj", "k_proj", "v_proj", "o_proj"), "layers.*.mlp.experts.gate_up_proj, layers.*.mlp.experts.down_proj"),
    ("olmo2", dict(), ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), None),
])
def test_day0_mixtral_and_olmo2_lora_targets(tmp_path, model_type, arch, targets, experts):
    """Mixtral: LoRA never on the router (`gate`: LoRA there moves tokens between experts), the fused 3-D experts
    said to stay frozen; OLMo-2: Llama's seven names, its q_norm / k_norm are not Linear."""
    from transformers import AutoConfig

    from mmtune.models.families import family_for_config

    folder, _ = _text_folder(tmp_path / model_type, model_type, **arch)
    fam = family_for_config(AutoConfig.from_pretrained(folder))
    assert fam.name == f"generic:{model_type}" and fam.lora_targets == targets
    notes = {k: v for k, v, _ in fam.inferred_notes}
    assert notes.get("model.family.experts") == experts
    assert "gate" not in fam.lora_targets
