"""A vision tower's patch embedding run as the matrix product it is (resolve: model.patch_embed).

Qwen2-VL, Qwen2.5-VL, Qwen3-VL, the Qwen Omnis and GLM-4V embed image and video patches with an `nn.Conv3d`
whose kernel equals its stride, applied to patches the processor has already cut out and flattened: each
output is one patch's pixels times the kernel, with no overlap -- a (patches x C*T*P*P) @ (C*T*P*P x dim)
matmul. As a convolution it goes through im2col or cuDNN's 3-D kernels: 2.4-3.4x the time of the matmul on
this CPU (benchmarks/patch_embed.py, results/patch_embed_cpu2_20261128_0f938d7.json), and on some GPU / cuDNN /
dtype combinations orders of magnitude slower (transformers issue #45750: Qwen3-VL's on Blackwell in bf16; vLLM, SGLang and
transformers' own opt-in `fusion_config={"patch_embeddings": True}` run it as a linear layer for that reason).

Here the Conv3d keeps its weight where it is (state dicts, checkpoints, exports and LoRA targets unchanged) and
is still called as before, so every hook on it still runs (ZeRO-3 gathers its weight in one, FSDP and the
planner's tracker see it); only that instance's `forward` becomes `F.linear` over the weight viewed as
(dim, C*T*P*P) for an input of whole patches (N, C, T, P, P), with the convolution's output shape
(N, dim, 1, 1, 1). Any other input shape runs the convolution as before. Transformers' fusion does the same at
`from_pretrained` only, renaming the weight into a new Linear; mmtune also builds models from configs (random
weights, tiny twins, the planner's meta model), so the swap is made on the built model, for the families
verified exact (Family.patch_embed_matmul, tests/models/test_patch_embed.py).
"""

from __future__ import annotations

import types


def flat_patch_embeds(model) -> list[tuple[str, object]]:
    """(name, module) of each `*patch_embed` module whose `proj` is a plain `nn.Conv3d` that does not overlap
    (kernel == stride, no padding or dilation, one group). A LoRA-wrapped `proj` is not one: left as it is."""
    import torch

    found = []
    for name, module in model.named_modules():
        proj = getattr(module, "proj", None)
        if name.rsplit(".", 1)[-1] == "patch_embed" and type(proj) is torch.nn.Conv3d \
                and proj.kernel_size == proj.stride and proj.padding == (0, 0, 0) \
                and proj.dilation == (1, 1, 1) and proj.groups == 1:
            found.append((name, module))
    return found


def _matmul_forward(self, x):
    """The Conv3d's forward on whole patches: (N, C, T, P, P) -> (N, dim, 1, 1, 1), one matmul."""
    import torch.nn.functional as F

    if x.dim() != 5 or tuple(x.shape[2:]) != tuple(self.kernel_size):
        return type(self).forward(self, x)  # not one patch per item: the convolution
    weight = self.weight  # (dim, C, T, P, P): each output is one patch's dot product with it
    out = F.linear(x.reshape(x.shape[0], -1), weight.reshape(weight.shape[0], -1), self.bias)
    return out.view(*out.shape, 1, 1, 1)


def run_patch_embeds_as_matmul(model) -> list[str]:
    """Swap the forward of the `proj` of each of `flat_patch_embeds(model)`; the names of the modules changed."""
    names = []
    for name, module in flat_patch_embeds(model):
        module.proj.forward = types.MethodType(_matmul_forward, module.proj)
        names.append(name)
    return names
