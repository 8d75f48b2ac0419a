"""The seed-003 loss: where the answer "looks" in the image, against where the objects are.

Heatmap source: hidden-state similarity, not attention weights. Under sdpa / FlashAttention-2 (the
attention every run uses, resolve/decisions.py) attention probabilities are never materialised, and
asking for them switches the model to eager attention: O(seq^2) memory in every layer of a full-size
model. Instead the answer tokens' mean hidden state (layer `layer`, the last by default) is compared by
scaled dot product with every image patch token's hidden state; a softmax over the patch tokens gives
the heatmap. It is differentiable into everything that shapes those hidden states (decoder LoRA,
projector, trained vision blocks) and costs one (batch, seq) score row.

The heatmap is pooled from the token grid to `grid` x `grid` cells (14 x 14 default) and compared with
the record's density map pooled the same way and normalised to sum 1 (`distance`: `kl` =
KL(target || heatmap), or `mse`). The target is FSC147's published density map
(`gt_density_map_adaptive_384_VarV2/<image>.npy`), else one made from the annotated points (one unit
of mass at each point). Records without either contribute nothing.
"""

from __future__ import annotations

import math

from .base import AuxLoss, register

EPS = 1e-8


@register("heatmap")
class HeatmapLoss(AuxLoss):
    OPTIONS = {"grid": 14, "distance": "kl", "layer": -1}
    model_kwargs = {"output_hidden_states": True}

    @classmethod
    def check_options(cls, options: dict) -> None:
        if not isinstance(options["grid"], int) or options["grid"] < 1:
            raise ValueError(f"heatmap grid must be a positive integer, not {options['grid']!r}")
        if options["distance"] not in ("kl", "mse"):
            raise ValueError(f"heatmap distance must be 'kl' or 'mse', not {options['distance']!r}")
        if not isinstance(options["layer"], int):
            raise ValueError(f"heatmap layer must be an integer (-1: the last), not {options['layer']!r}")

    # ---- per record, on the CPU ------------------------------------------------------------------
    def record_inputs(self, record, encoded: dict) -> dict:
        import torch

        g = self.options["grid"]
        n_tok = encoded["input_ids"].shape[-1]
        cells = torch.zeros(n_tok, dtype=torch.long)  # 0: not a patch token; c + 1: grid cell c
        target = torch.zeros(1, g * g, dtype=torch.float32)
        none = {f"aux_{self.name}_cell": cells, f"aux_{self.name}_target": target,
                self.has_key(): torch.zeros(1, dtype=torch.long)}
        layout = self._token_grid(encoded)
        dens = density_of(getattr(record, "targets", None) or {}) if record is not None else None
        if layout is None or dens is None or float(dens.sum()) <= 0:
            return none
        pos, gh, gw = layout
        cell_of_token = _cells(gh, gw, g)  # (gh * gw,) cell index per token, row-major
        cells[pos] = cell_of_token + 1
        per_token = torch.as_tensor(_block_sums(dens, gh, gw), dtype=torch.float32).reshape(-1)
        target[0].index_add_(0, cell_of_token, per_token)
        target /= target.sum()
        return {**none, self.has_key(): torch.ones(1, dtype=torch.long)}

    def _token_grid(self, encoded: dict):
        """(positions of the first image's tokens, grid rows, grid cols) or None."""
        import torch

        ids = encoded["input_ids"].reshape(-1)
        if self.ctx.image_token_id is None:
            return None
        pos = torch.nonzero(ids == self.ctx.image_token_id).reshape(-1)
        thw = encoded.get("image_grid_thw")
        if thw is not None and len(thw):
            _, h, w = (int(v) for v in thw.reshape(-1, 3)[0])
            gh, gw = h // self.ctx.merge_size, w // self.ctx.merge_size
        else:  # one square grid of tokens per image (LLaVA-style single view)
            side = math.isqrt(len(pos))
            gh = gw = side
        if gh * gw == 0 or len(pos) < gh * gw:
            return None
        return pos[: gh * gw], gh, gw

    # ---- the planner's batch ---------------------------------------------------------------------
    def placeholder_inputs(self, batch: dict) -> dict:
        import torch

        g = self.options["grid"]
        ids = batch["input_ids"]
        cells = torch.zeros_like(ids, dtype=torch.long)
        if self.ctx.image_token_id is not None:
            img = ids == self.ctx.image_token_id
            # Any mapping of the patch tokens to cells traces the same ops and memory.
            cells = torch.where(img, torch.cumsum(img.long(), dim=1) % (g * g) + 1, cells)
        b = ids.shape[0]
        return {f"aux_{self.name}_cell": cells,
                f"aux_{self.name}_target": torch.full((b, g * g), 1.0 / (g * g)),
                self.has_key(): torch.ones(b, dtype=torch.long)}

    # ---- in the step (real or fake tensors) ------------------------------------------------------
    def heatmap(self, batch: dict, output):
        """(batch, grid*grid) heatmap of each record's answer over its image's cells (sums to 1 where
        the record has patch tokens)."""
        import torch

        hs = getattr(output, "hidden_states", None)
        if hs is None and isinstance(output, dict):
            hs = output.get("hidden_states")
        if hs is None:
            raise TypeError("the heatmap auxiliary loss needs the model's hidden states (output_hidden_states=True); "
                            f"this model's output {type(output).__name__} has none")
        h = hs[self.options["layer"]].float()  # (B, L, D)
        cells = batch[f"aux_{self.name}_cell"].to(h.device)
        answer = (batch["labels"] != -100).to(h.device, h.dtype)  # (B, L)
        query = (answer.unsqueeze(-1) * h).sum(1) / answer.sum(1, keepdim=True).clamp_min(1.0)  # (B, D)
        # fp32 scores: autocast would run the einsum in the compute dtype
        scores = torch.einsum("bld,bd->bl", h, query).float() / math.sqrt(h.shape[-1])
        is_patch = cells > 0
        scores = scores.masked_fill(~is_patch, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1) * is_patch  # 0 off the image; a row without one stays 0
        g2 = batch[f"aux_{self.name}_target"].shape[-1]
        pooled = torch.zeros(h.shape[0], g2 + 1, device=h.device, dtype=probs.dtype)
        return pooled.scatter_add(1, cells, probs)[:, 1:]

    def __call__(self, batch: dict, output):
        import torch

        pred = self.heatmap(batch, output)
        target = batch[f"aux_{self.name}_target"].to(pred.device, torch.float32)
        target = target / target.sum(-1, keepdim=True).clamp_min(EPS)
        if self.options["distance"] == "kl":
            per_record = (target * (torch.log(target + EPS) - torch.log(pred + EPS))).sum(-1)
        else:
            per_record = ((pred - target) ** 2).sum(-1)
        has = batch[self.has_key()].to(pred.device, torch.float32)
        return (per_record * has).sum()


def density_of(targets: dict):
    """The record's density map as a float64 (H, W) array: the published .npy, else unit mass at each
    annotated point on a (H, W) canvas (`size` = [W, H], else the points' extent); None without either."""
    import numpy as np

    path = targets.get("density")
    if path:
        return np.asarray(np.load(path), dtype=np.float64)
    points = targets.get("points")
    if not points:
        return None
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    w, h = (targets.get("size") or [None, None])[:2]
    w = int(w) if w else int(pts[:, 0].max()) + 1
    h = int(h) if h else int(pts[:, 1].max()) + 1
    canvas = np.zeros((h, w))
    xs = np.clip(pts[:, 0].astype(int), 0, w - 1)
    ys = np.clip(pts[:, 1].astype(int), 0, h - 1)
    np.add.at(canvas, (ys, xs), 1.0)
    return canvas


def _block_sums(dens, gh: int, gw: int):
    """Sum of the map over each of gh x gw equal blocks (the image area each token covers)."""
    import numpy as np

    h, w = dens.shape
    if h < gh or w < gw:  # a map coarser than the tokens: repeat it up first
        dens = np.kron(dens, np.ones((math.ceil(gh / h), math.ceil(gw / w)))) / (
            math.ceil(gh / h) * math.ceil(gw / w))
        h, w = dens.shape
    rows = np.add.reduceat(dens, (np.arange(gh) * h) // gh, axis=0)
    return np.add.reduceat(rows, (np.arange(gw) * w) // gw, axis=1)


def _cells(gh: int, gw: int, g: int):
    """Grid cell (row-major in g x g) of each token of a gh x gw token grid."""
    import torch

    r = torch.arange(gh).repeat_interleave(gw)
    c = torch.arange(gw).repeat(gh)
    return (r * g // gh) * g + (c * g // gw)
