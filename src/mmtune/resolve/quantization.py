"""The k-bit base of a LoRA run, decided once: 4-bit (qlora) or int8 (lora8bit), and how 4-bit weights are stored.

- `adapter.method=qlora`: the decoder's linear layers in NF4/FP4 (bitsandbytes Linear4bit).
- `adapter.method=lora8bit`: the decoder's linear layers in int8 with LLM.int8()'s outlier decomposition
  (bitsandbytes Linear8bitLt, `adapter.llm_int8_threshold`): 1 byte per weight + one fp32 scale per row.
- `adapter.bnb_4bit_quant_storage`: the dtype the packed 4-bit data is stored in. FSDP2 shards a parameter
  by chunking it and, under mixed precision, casts every floating parameter it gathers to the compute
  dtype: packed 4-bit data stored in another float dtype is then reinterpreted (fp32 storage under bf16:
  "shape '[128, 32]' is invalid for input of size 2048" on 2 gloo ranks; fp16 storage under bf16: the same
  size, so silently wrong weights). Stored in the compute dtype the cast is a no-op and the packed bytes
  travel untouched (bitsandbytes#970, the FSDP-QLoRA path of bitsandbytes' and peft's docs). `auto` picks
  that under fsdp and uint8 (bitsandbytes' default) otherwise; the bytes are the same either way.
"""

from __future__ import annotations

from ..errors import ConfigError
from .decisions import Decision

# train.precision -> the adapter.bnb_4bit_quant_storage name of its compute dtype
STORAGE_OF_PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}
STORAGE_KEY = "adapter.bnb_4bit_quant_storage"


def storage_problem(adapter, strategy: str, precision: str) -> str | None:
    """Why `adapter.bnb_4bit_quant_storage` cannot be used (None when it can): a float storage other than the
    compute dtype. One rule for the resolved run (which refuses) and the doctor (MM092, which reports it).
    uint8 is bnb's default; FSDP2 (torch 2.13) leaves integer weights uncast, so it shards too (same bytes)."""
    store = adapter.bnb_4bit_quant_storage
    want = STORAGE_OF_PRECISION[precision]
    if adapter.method != "qlora" or store in ("auto", "uint8", want):
        return None
    if strategy == "fsdp":
        return (f"adapter.bnb_4bit_quant_storage={store} under train.strategy=fsdp with train.precision={precision}: "
                f"FSDP2 gathers every floating weight in the compute dtype ({want}), which reinterprets packed 4-bit "
                "data stored in another float dtype (a shape error, or silently wrong weights when the sizes agree); "
                "the FSDP-QLoRA path stores it in the compute dtype")
    return (f"adapter.bnb_4bit_quant_storage={store} with train.precision={precision}: mmtune casts every floating "
            f"frozen weight to the compute dtype ({want}) at load, which would reinterpret packed 4-bit data stored "
            "in another float dtype")


def decide_kbit(adapter, strategy: str, precision: str) -> tuple[str | None, list[Decision], dict]:
    """(the resolved run's `quantization` or None, its decisions, updates to the adapter section in force)."""
    if adapter.method == "lora8bit":
        q = f"int8 LLM.int8() (outlier threshold {adapter.llm_int8_threshold:g})"
        outliers = ("input features above the threshold take a 16-bit matmul" if adapter.llm_int8_threshold > 0
                    else "no outlier decomposition (threshold 0)")
        return q, [Decision("adapter.method", f"lora8bit: decoder linear layers {q}",
                            f"1 byte per weight + an fp32 scale per row; {outliers}; vision/audio/projector/lm_head "
                            "stay in the compute dtype (failure mode 4)")], {}
    if adapter.method != "qlora":
        return None, [], {}
    q = f"4-bit {adapter.bnb_4bit_quant_type}" + (" double-quant" if adapter.bnb_4bit_double_quant else "")
    decisions = [Decision("adapter.method", f"qlora: decoder linear layers {q}",
                          "vision/audio/projector/lm_head stay in the compute dtype (failure mode 4)")]
    problem = storage_problem(adapter, strategy, precision)
    if problem:
        raise ConfigError(problem, where=STORAGE_KEY,
                          fix=f"{STORAGE_KEY}=auto (the compute dtype under fsdp, uint8 otherwise) or {STORAGE_KEY}="
                              f"{STORAGE_OF_PRECISION[precision]}")
    requested = adapter.bnb_4bit_quant_storage
    if requested != "auto":
        storage, why = requested, "requested"
    elif strategy == "fsdp":
        storage = STORAGE_OF_PRECISION[precision]
        why = (f"auto: train.strategy=fsdp, so the packed 4-bit data is stored in the compute dtype ({storage}) and "
               "FSDP2 shards and gathers it like the weights beside it (the same bytes as uint8)")
    else:
        storage, why = "uint8", "auto: bitsandbytes' default (nothing shards the 4-bit weights)"
    decisions.append(Decision(STORAGE_KEY, storage, why, changed=requested == "auto"))
    return q, decisions, {"bnb_4bit_quant_storage": storage}
