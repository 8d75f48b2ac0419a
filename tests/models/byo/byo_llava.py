"""A research model outside transformers' registry, as a user would bring it: a LLaVA-like variant
(CLIP vision tower -> 2-layer MLP projector -> Qwen2 decoder) with its own output type, a factory and a
processor function. Built at tiny size from the tiny LLaVA twin's CLIP config and a Qwen2 config, so
it runs on a CPU; nothing here is mmtune's except the tiny twin's configs and processor it borrows."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class MyLlavaOutput:
    """Not a transformers ModelOutput: a plain dataclass, as research code often returns."""

    loss: torch.Tensor | None
    logits: torch.Tensor
    hidden_states: tuple | None = None


class MyLlava(nn.Module):
    # The contract (docs/byo_model.md): components by parameter-name prefix.
    mmtune_components = {"vision": ("vision_tower.",), "projector": ("projector.",),
                         "decoder": ("language_model.model.",), "lm_head": ("language_model.lm_head.",)}
    mmtune_modalities = ("text", "image")

    def __init__(self, vision_config, text_config, image_token_id: int):
        super().__init__()
        from transformers import CLIPVisionModel, Qwen2ForCausalLM

        self.vision_tower = CLIPVisionModel(vision_config)
        d_v, d_t = vision_config.hidden_size, text_config.hidden_size
        self.projector = nn.Sequential(nn.Linear(d_v, d_t), nn.GELU(), nn.Linear(d_t, d_t))
        self.language_model = Qwen2ForCausalLM(text_config)
        self.image_token_id = image_token_id

    def embed(self, input_ids, pixel_values=None):
        embeds = self.language_model.get_input_embeddings()(input_ids)
        if pixel_values is not None:
            vis = self.vision_tower(pixel_values=pixel_values.to(embeds.dtype), output_hidden_states=True)
            feats = self.projector(vis.hidden_states[-2][:, 1:])  # patch tokens of the second-last layer
            mask = (input_ids == self.image_token_id).unsqueeze(-1).expand_as(embeds)
            embeds = embeds.masked_scatter(mask, feats.reshape(-1, feats.shape[-1]).to(embeds.dtype))
        return embeds

    def forward(self, input_ids, attention_mask=None, pixel_values=None, labels=None, use_cache=None,
                output_hidden_states=None, **kwargs):
        out = self.language_model(inputs_embeds=self.embed(input_ids, pixel_values), attention_mask=attention_mask,
                                  use_cache=use_cache, output_hidden_states=output_hidden_states)
        loss = None
        if labels is not None:
            logits = out.logits[:, :-1].float()
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
        return MyLlavaOutput(loss=loss, logits=out.logits, hidden_states=out.hidden_states)

    @torch.no_grad()
    def generate(self, input_ids, attention_mask=None, pixel_values=None, max_new_tokens=8, eos_token_id=None,
                 pad_token_id=None, do_sample=False, **kwargs):
        """Greedy, without a cache (the research code's own, simple generation)."""
        ids, mask = input_ids, attention_mask if attention_mask is not None else torch.ones_like(input_ids)
        done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
        for _ in range(max_new_tokens):
            logits = MyLlava.forward(self, ids, attention_mask=mask, pixel_values=pixel_values).logits[:, -1]
            nxt = logits.argmax(-1)
            if eos_token_id is not None:
                nxt = torch.where(done, torch.full_like(nxt, pad_token_id or 0), nxt)
                done |= nxt == eos_token_id
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            mask = torch.cat([mask, torch.ones_like(nxt[:, None])], dim=1)
            if done.all():
                break
        return ids


class TupleLlava(MyLlava):
    """The same model returning a tuple (loss, logits) as return_dict=False code does."""

    def forward(self, input_ids, attention_mask=None, pixel_values=None, labels=None, use_cache=None, **kwargs):
        out = super().forward(input_ids, attention_mask, pixel_values, labels, use_cache)
        return (out.loss, out.logits) if labels is not None else (out.logits,)


class DictLlava(MyLlava):
    """The same model returning a dict."""

    def forward(self, input_ids, attention_mask=None, pixel_values=None, labels=None, use_cache=None, **kwargs):
        out = super().forward(input_ids, attention_mask, pixel_values, labels, use_cache)
        return {"loss": out.loss, "logits": out.logits}


class NoLabels(MyLlava):
    """A forward that takes no labels (fine with model.loss=logits, refused with model.loss=output)."""

    def forward(self, input_ids, attention_mask=None, pixel_values=None, use_cache=None):
        return super().forward(input_ids, attention_mask, pixel_values, None, use_cache)


class LogitsOnly(MyLlava):
    """Returns logits and never a loss: model.loss=output finds none."""

    def forward(self, input_ids, attention_mask=None, pixel_values=None, labels=None, use_cache=None, **kwargs):
        return {"logits": super().forward(input_ids, attention_mask, pixel_values, None, use_cache).logits}


def _configs():
    from transformers import Qwen2Config

    from mmtune.models.tiny import tiny_config_and_processor

    llava, processor = tiny_config_and_processor("tiny/llava")
    t = llava.text_config
    text = Qwen2Config(vocab_size=t.vocab_size, hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
                       num_hidden_layers=t.num_hidden_layers, num_attention_heads=t.num_attention_heads,
                       num_key_value_heads=t.num_key_value_heads, max_position_embeddings=t.max_position_embeddings,
                       pad_token_id=t.pad_token_id, eos_token_id=t.eos_token_id, tie_word_embeddings=False)
    return llava.vision_config, text, llava.image_token_index


def build(name: str, *, dtype=None, cls=MyLlava):
    """The factory: `name` picks a size; only "tiny" exists here."""
    if name != "tiny":
        raise ValueError(f"unknown size {name!r}")
    torch.manual_seed(0)
    vision, text, image_token = _configs()
    model = cls(vision, text, image_token)
    return model.to(dtype) if dtype is not None else model


def build_tuple(name, *, dtype=None):
    return build(name, dtype=dtype, cls=TupleLlava)


def build_dict(name, *, dtype=None):
    return build(name, dtype=dtype, cls=DictLlava)


def build_nolabels(name, *, dtype=None):
    return build(name, dtype=dtype, cls=NoLabels)


def build_logits_only(name, *, dtype=None):
    return build(name, dtype=dtype, cls=LogitsOnly)


def make_processor(name: str):
    """The processor: CLIP image processing + a tokenizer whose `<image>` expands to the tower's 16 patch tokens."""
    from mmtune.models.tiny import tiny_config_and_processor

    return tiny_config_and_processor("tiny/llava")[1]
