"""The k-bit decoder base of qlora / lora8bit, one entry per way a model is built (models/load.py):

- from pretrained weights: `bnb_config` (transformers quantizes while loading);
- from a config (tiny twins, random weights): `quantize_decoder` quantizes the built layers here;
- on meta (plans, the doctor): `plan_decoder` puts storage-exact stand-ins in their place
  (models/packed4bit.py, models/packed8bit.py).

Every path quantizes the same layers: the decoder's linear layers; vision tower, audio encoder, projector and
lm_head stay in the compute dtype (failure mode 4). What is decided (4-bit or int8, the 4-bit storage dtype)
comes from the resolved run (resolve/quantization.py).
"""

from __future__ import annotations

from .families import Family

STORAGE_DTYPES = {"uint8": "uint8", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def require_bitsandbytes():
    """bitsandbytes, or a ConfigError naming the extra that installs it (QLoRA's 4-bit layers need it;
    plans and the doctor use storage-exact stand-ins and do not)."""
    try:
        import bitsandbytes
    except ImportError:
        from ..errors import ConfigError

        raise ConfigError("adapter.method=qlora / lora8bit needs bitsandbytes (its 4-bit / int8 layers), which is "
                          "not installed here", where="adapter.method",
                          fix="pip install 'mmtune[qlora]', or adapter.method=lora") from None
    return bitsandbytes


def quantize_decoder_4bit(model, family: Family, compute_dtype, quant_type: str = "nf4",
                          double_quant: bool = True, quant_storage=None) -> int:
    """Replace the decoder's nn.Linear layers by bitsandbytes Linear4bit (NF4), in place.

    Used for models built from a config (tiny twins): there are no pretrained weights to quantize
    while loading, so the random weights are quantized here. The vision tower, audio encoder,
    projector and lm_head are left in the compute dtype. Returns the number of layers replaced.
    `quant_storage`: the packed data's dtype (uint8 by default; the compute dtype under FSDP2:
    resolve/quantization.py). The layer is the weight's `module`, as transformers makes it: bnb then keeps
    the quant state on the layer too, and restores it onto the plain tensor FSDP2 gathers.
    """
    bnb = require_bitsandbytes()
    import torch
    from torch import nn

    decoder = family.components.get("decoder", ())
    others = tuple(p for c, ps in family.components.items() if c != "decoder" for p in ps)
    targets = [(n, m) for n, m in model.named_modules()
               if isinstance(m, nn.Linear) and n.startswith(decoder) and not (n + ".").startswith(others)]
    store = {} if quant_storage is None else {"quant_storage": quant_storage}
    for name, lin in targets:
        q = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=lin.bias is not None,
                              compute_dtype=compute_dtype, compress_statistics=double_quant,
                              quant_type=quant_type, device="meta", **store)
        q.weight = bnb.nn.Params4bit(lin.weight.data.to(compute_dtype).cpu(), requires_grad=False,
                                     compress_statistics=double_quant, quant_type=quant_type, module=q, **store)
        if lin.bias is not None:
            q.bias = nn.Parameter(lin.bias.data.to(compute_dtype), requires_grad=False)
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, q)
    device = next((p.device for p in model.parameters() if p.device.type != "meta"), torch.device("cpu"))
    for _, m in model.named_modules():
        if isinstance(m, bnb.nn.Linear4bit):
            m.to(device)  # Params4bit quantizes on its first move to a device
    model.is_loaded_in_4bit = True
    return len(targets)


def storage_dtype(adapter):
    """The torch dtype of adapter.bnb_4bit_quant_storage as resolved (auto outside a resolved run: uint8)."""
    import torch

    name = adapter.bnb_4bit_quant_storage
    return getattr(torch, STORAGE_DTYPES["uint8" if name == "auto" else name])


def decoder_linears(model, family) -> list:
    """(name, nn.Linear) of the decoder's plain linear layers: what every k-bit path quantizes."""
    from torch import nn

    decoder = family.components.get("decoder", ())
    others = tuple(p for c, ps in family.components.items() if c != "decoder" for p in ps)
    return [(n, m) for n, m in model.named_modules()
            if type(m) is nn.Linear and n.startswith(decoder) and not (n + ".").startswith(others)]


def bnb_config(cfg, family, dtype):
    """transformers' BitsAndBytesConfig for from_pretrained: the decoder quantized while loading."""
    from transformers import BitsAndBytesConfig

    require_bitsandbytes()  # transformers' own message would not name the extra
    skip = [p.rstrip(".") for c, ps in family.components.items() if c != "decoder" for p in ps]
    a = cfg.adapter
    if a.method == "lora8bit":
        return BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=a.llm_int8_threshold,
                                  llm_int8_skip_modules=skip, llm_int8_has_fp16_weight=False)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=a.bnb_4bit_quant_type,
                              bnb_4bit_use_double_quant=a.bnb_4bit_double_quant, bnb_4bit_compute_dtype=dtype,
                              bnb_4bit_quant_storage=storage_dtype(a), llm_int8_skip_modules=skip)


def quantize_decoder(model, cfg, family, dtype) -> str:
    """Quantize a model built from a config (no pretrained weights to quantize while loading), in place;
    returns the decision line."""
    a = cfg.adapter
    if a.method == "lora8bit":
        n = quantize_decoder_int8(model, family, dtype, a.llm_int8_threshold)
        return f"lora8bit: {n} decoder linear layers -> int8 (bitsandbytes Linear8bitLt)"
    store = storage_dtype(a)
    n = quantize_decoder_4bit(model, family, dtype, a.bnb_4bit_quant_type, a.bnb_4bit_double_quant, quant_storage=store)
    return f"qlora: {n} decoder linear layers -> 4-bit {a.bnb_4bit_quant_type}, stored as {str(store)[6:]}"


def plan_decoder(model, cfg, family, dtype, cuda_target: bool) -> str:
    """Storage-exact stand-ins on meta (plans, the doctor); returns the decision line."""
    a = cfg.adapter
    if a.method == "lora8bit":
        from .packed8bit import OUTLIER_FRACTION, replace_decoder_linears_int8

        n = replace_decoder_linears_int8(model, family, dtype, a.llm_int8_threshold, cuda_target)
        how = (f"CUDA: int8 matmul, {OUTLIER_FRACTION:.0%} of input features planned as 16-bit outlier columns"
               if cuda_target and a.llm_int8_threshold > 0 else
               "CUDA: int8 matmul, no outlier columns (threshold 0)" if cuda_target else
               "CPU: bitsandbytes dequantizes each weight for a 16/32-bit matmul")
        return f"lora8bit: {n} decoder linear layers at int8 storage + fp32 row scales (meta; {how})"
    from .packed4bit import replace_decoder_linears

    store = storage_dtype(a)
    n = replace_decoder_linears(model, family, dtype, a.bnb_4bit_double_quant, storage=store)
    return f"qlora: {n} decoder linear layers at packed 4-bit storage ({str(store)[6:]}, meta)"


def quantize_decoder_int8(model, family, compute_dtype, threshold: float = 6.0) -> int:
    """Replace the decoder's nn.Linear layers by bitsandbytes Linear8bitLt (int8 weights, frozen), in place.

    bnb quantizes an `Int8Params` on its first move to a device (through fp16: its row-wise absmax
    quantizer reads fp16), as it does for 4-bit. Returns the number of layers replaced."""
    import torch
    from torch import nn

    bnb = require_bitsandbytes()
    targets = decoder_linears(model, family)
    device = next((p.device for p in model.parameters() if p.device.type != "meta"), torch.device("cpu"))
    for name, lin in targets:
        q = bnb.nn.Linear8bitLt(lin.in_features, lin.out_features, bias=lin.bias is not None, has_fp16_weights=False,
                                threshold=threshold, device="meta")
        q.weight = bnb.nn.Int8Params(lin.weight.data.to(torch.float16).cpu(), requires_grad=False,
                                     has_fp16_weights=False)
        if lin.bias is not None:
            q.bias = nn.Parameter(lin.bias.data.to(compute_dtype).cpu(), requires_grad=False)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, q.to(device))  # quantized here
    model.is_loaded_in_8bit = True  # peft's dispatcher wraps Linear8bitLt with its 8-bit LoRA layer on this flag
    return len(targets)
