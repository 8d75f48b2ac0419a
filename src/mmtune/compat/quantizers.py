"""Whether this Python can load a pre-quantized checkpoint, asked of transformers' own quantizer classes.

A checkpoint saved quantized (GPTQ, AWQ, compressed-tensors, FP8, bitsandbytes: `quantization_config` in its
config.json) is loaded through the quantizer transformers picks for its `quant_method`, and each one checks its
backend package in its own place: the config class (compressed-tensors), the quantizer's constructor (GPTQ:
optimum) or `validate_environment` (AWQ and GPTQ: gptqmodel). Asking the same three steps here, without a model,
answers with transformers' own words and its own package minimums, for every method this transformers knows,
instead of a second list of packages that would drift from it. `AutoHfQuantizer` and `validate_environment` are
transformers internals, hence this module.
"""

from __future__ import annotations


def quantizer_blocker(quantization_config: dict) -> tuple[str, str] | None:
    """(kind, transformers' message) when loading a checkpoint with this `quantization_config` stops before any
    weight is read: kind "package" (an ImportError: a backend package missing or too old) or "method" (this
    transformers does not know the method); None when it would get past the quantizer's checks here (a check
    that needs a GPU, a RuntimeError or ValueError, is the GPU machine's and not answered here)."""
    import logging

    import torch
    from transformers.quantizers.auto import AutoHfQuantizer, AutoQuantizationConfig

    try:
        config = AutoQuantizationConfig.from_dict(dict(quantization_config))
    except ImportError as e:
        return "package", str(e)
    except ValueError as e:
        return ("method", str(e)) if "Unknown quantization type" in str(e) else None
    except Exception:  # noqa: BLE001 - a malformed config is transformers' to report at load, not a package question
        return None
    tf_logger = logging.getLogger("transformers")
    level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)  # the FP8 quantizer's "dequantizing on the CPU" note is about this probe only
    try:
        quantizer = AutoHfQuantizer.from_config(config, pre_quantized=True)
        quantizer.validate_environment(device_map=None, dtype=torch.bfloat16, weights_only=True)
    except ImportError as e:
        return "package", str(e)
    except Exception:  # noqa: BLE001 - device checks (no GPU here, offload maps) belong to the machine that trains
        return None
    finally:
        tf_logger.setLevel(level)
    return None


def dequantized_for_training(quantization_config: dict):
    """transformers' config that loads this pre-quantized checkpoint dequantized, when transformers cannot train
    through the method's layers (its quantizer's `is_trainable` is False: MXFP4, gpt-oss's experts) and its config
    has a `dequantize` switch; None otherwise (a trainable method such as fine-grained FP8 or bitsandbytes, or one
    without the switch). Left to transformers, such a checkpoint stays quantized only where the method's kernels
    are installed (triton and `kernels` on a GPU), so the same config trains here and fails on the GPU machine."""
    import logging

    from transformers.quantizers.auto import AutoHfQuantizer, AutoQuantizationConfig

    tf_logger = logging.getLogger("transformers")
    level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)  # MXFP4's is_trainable logs "don't support training" for this probe
    try:
        config = AutoQuantizationConfig.from_dict(dict(quantization_config))
        if getattr(config, "dequantize", True):  # no switch, or already dequantized by the checkpoint's config
            return None
        if AutoHfQuantizer.from_config(config, pre_quantized=True).is_trainable:
            return None
    except Exception:  # noqa: BLE001 - a method this transformers lacks is MM258's to report
        return None
    finally:
        tf_logger.setLevel(level)
    config.dequantize = True
    return config
