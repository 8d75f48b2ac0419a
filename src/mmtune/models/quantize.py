"""QLoRA's 4-bit decoder: only the decoder's linear layers are quantized; the vision tower, audio encoder,
projector and lm_head stay in the compute dtype, never uint8 (failure mode 4). bitsandbytes is imported
only when a run quantizes, with the extra that installs it named when it is missing."""

from __future__ import annotations

from .families import Family


def require_bitsandbytes():
    """bitsandbytes, or a ConfigError naming the extra that installs it (QLoRA's 4-bit layers need it;
    plans and the doctor use storage-exact stand-ins and do not)."""
    try:
        import bitsandbytes
    except ImportError:
        from ..errors import ConfigError

        raise ConfigError("adapter.method=qlora needs bitsandbytes, which is not installed here",
                          where="adapter.method", fix="pip install 'mmtune[qlora]', or adapter.method=lora") from None
    return bitsandbytes


def quantize_decoder_4bit(model, family: Family, compute_dtype, quant_type: str = "nf4",
                          double_quant: bool = True) -> int:
    """Replace the decoder's nn.Linear layers by bitsandbytes Linear4bit (NF4), in place.

    Used for models built from a config (tiny twins): there are no pretrained weights to quantize
    while loading, so the random weights are quantized here. The vision tower, audio encoder,
    projector and lm_head are left in the compute dtype. Returns the number of layers replaced.
    """
    bnb = require_bitsandbytes()
    import torch
    from torch import nn

    decoder = family.components.get("decoder", ())
    others = tuple(p for c, ps in family.components.items() if c != "decoder" for p in ps)
    targets = [(n, m) for n, m in model.named_modules()
               if isinstance(m, nn.Linear) and n.startswith(decoder) and not (n + ".").startswith(others)]
    for name, lin in targets:
        q = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=lin.bias is not None,
                              compute_dtype=compute_dtype, compress_statistics=double_quant,
                              quant_type=quant_type, device="meta")
        q.weight = bnb.nn.Params4bit(lin.weight.data.to(compute_dtype).cpu(), requires_grad=False,
                                     compress_statistics=double_quant, quant_type=quant_type)
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


def bnb_config(cfg, family: Family, dtype):
    from transformers import BitsAndBytesConfig

    require_bitsandbytes()  # transformers' own message would not name the extra
    # Everything that is not the decoder stays unquantized, in the compute dtype (failure mode 4).
    skip = [p.rstrip(".") for c, ps in family.components.items() if c != "decoder" for p in ps]
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=cfg.adapter.bnb_4bit_quant_type,
                              bnb_4bit_use_double_quant=cfg.adapter.bnb_4bit_double_quant,
                              bnb_4bit_compute_dtype=dtype, llm_int8_skip_modules=skip)
