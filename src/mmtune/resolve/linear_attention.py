"""Which path a hybrid decoder's linear-attention layers take (Family.linear_attention: Qwen3.5's gated delta net).

transformers decorates the layer's kernels (`use_kernel_func_from_hub_with_fallback`): at import of the modeling
module it takes flash-linear-attention's `chunk_gated_delta_rule` and Dao's `causal_conv1d_fn` when they import,
else its torch reference: the same chunked recurrence in fp32 with a Python loop over 64-token chunks, correct but
much slower (transformers#48718: a Qwen3.5-9B fine-tune's step 1.22 s on it, 0.70 s with the kernels; the
fallback's DeltaNet layers were half the step), and said only once in the log. Both kernels are GPU-only (Triton,
CUDA). So the run says which path it takes, and why, in its decisions; the planner traces the torch path (meta
tensors: the fp32 chunk tensors), and doctor MM343 names a CUDA run that would take the fallback, with the install
line.
"""

from __future__ import annotations

KEY = "model.linear_attention"
# the public measurement of what the fallback costs a training step
MEASURED = "transformers#48718: a Qwen3.5-9B fine-tune on 8x B200, 1.22 s a step on it, 0.70 s with flash-linear-attention"


def missing_kernels(family) -> list[tuple[str, str, str]]:
    """The family's fast kernels that do not import here: (module, pip distribution, what it runs) each."""
    import importlib.util

    from .installed import import_problem

    return [k for k in family.linear_attention
            if importlib.util.find_spec(k[0]) is None or import_problem(k[0]) is not None]


def install_line(kernels) -> str:
    return "pip install " + " ".join(dist for _, dist, _ in kernels)


def decide_linear_attention(family, target):
    """The Decision for a family with linear-attention layers (None for the others)."""
    from .decisions import Decision

    kernels = family.linear_attention
    if not kernels:
        return None
    fast = " + ".join(f"{dist} ({what})" for _, dist, what in kernels)
    fallback = ("transformers' torch fallback: the chunked gated delta rule in fp32, a loop over 64-token chunks, "
                "and the conv1d as F.conv1d")
    if target.gpu is None:
        return Decision(KEY, "torch fallback", f"{fallback}; the fast kernels ({fast}) run on CUDA only")
    if not target.local:
        return Decision(KEY, "fast kernels if installed there", f"{fast} on {target.gpu.name} where installed, "
                        f"else {fallback} ({MEASURED}); planned as the torch fallback, whose fp32 chunk tensors are "
                        "at least what the kernels hold; doctor MM343")
    missing = missing_kernels(family)
    if missing:
        names = ", ".join(dist for _, dist, _ in missing)
        return Decision(KEY, "torch fallback", f"{names} not importable here: {fallback}, correct but slower "
                        f"({MEASURED}); {install_line(missing)} (doctor MM343)", changed=True)
    return Decision(KEY, "fast kernels", f"{fast}, installed here")
