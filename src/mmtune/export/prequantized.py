"""`mmtune export --merge` of a run whose base checkpoint was saved quantized (config.json's `quantization_config`:
bitsandbytes 4-bit / 8-bit as unsloth's `-bnb-4bit` uploads, GPTQ, AWQ, FP8). Loading such a base gives quantized
layers whatever the run's method was, and merging there either fails in transformers ("You cannot cast a
bitsandbytes model in a new `dtype`") or peft ("Cannot merge LORA layers when the model is gptq quantized"), or
rounds the update back into 4-bit blocks. The adapter was trained against the dequantized values of those
weights, so the merge that computes what was trained is into the dequantized base, in the compute dtype: that is
what transformers' own `dequantize` gives, for the methods that have one."""

from __future__ import annotations

from ..errors import MMTuneError


def dequantize_base(model, dtype, name: str, ckpt) -> list[str]:
    """Dequantize a pre-quantized base in place before the adapter is merged; the export's note saying so (empty
    when the base was not quantized). A method transformers cannot dequantize stops with the ways that work."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None or not getattr(model, "is_quantized", True):
        return []
    method = getattr(quantizer.quantization_config, "quant_method", "quantized")
    method = str(getattr(method, "value", method))  # transformers' QuantizationMethod enum -> "bitsandbytes"
    try:
        model.dequantize(dtype=dtype)
    except NotImplementedError:
        raise MMTuneError(
            f"the run's base {name} is saved quantized ({method}) and transformers cannot dequantize {method} "
            "weights, so the adapter cannot be merged into them (peft: \"Cannot merge LORA layers when the model is "
            f"{method} quantized\")", where=str(ckpt),
            fix=f"mmtune export {ckpt} without --merge (the adapter loads on the quantized base for inference), or "
                "train on the 16-bit base model (model.name=<its base>; adapter.method=qlora for the 4-bit memory) "
                "and merge that run") from None
    return [f"the base {name} is saved quantized ({method}): it was dequantized to {str(dtype).removeprefix('torch.')} "
            "and the adapter merged there (what training computed), so the merged model is a 16-bit model, about "
            "4x the size of the quantized one on disk (quantize it again for serving if needed)"]
