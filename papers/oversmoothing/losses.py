"""The three anti-over-smoothing losses of patch diversification (Gong et al. 2021; poster, "Suppressing
Over-smoothing"), plus the patch-level CutMix the mixing loss trains on.

h = (h^cls, h_1, ..., h_n) are the last layer's tokens, read (like every feature here) through forward
hooks: the output of the model's final LayerNorm, i.e. what the classifier reads (the release applies
its losses there too). e are the first layer's patch tokens, gradient stopped.

- cosine:      l_cos  = 1/(n(n-1)) sum_{i != j} h_i^T h_j / (||h_i|| ||h_j||), minimised: the poster's
               signed form (``cos_form='signed'``, the default). The arXiv paper (v2) minimises the
               absolute cosine |h_i^T h_j| / (||h_i|| ||h_j||) instead (``cos_form='absolute'``), which
               cannot be lowered by making patches anti-aligned. The release has no cosine loss.
- contrastive: l_cons = -1/n sum_i log [ exp(e_i^T h_i) / (exp(e_i^T h_i) + exp(e_i^T hbar)) ],
               hbar = sum_j h_j / n, raw dot products (no normalisation, no temperature), as the poster
               writes it. ``negatives='patches'`` gives the InfoNCE form over all patches instead,
               -1/n sum_i log [ exp(e_i^T h_i) / sum_j exp(e_i^T h_j) ].
               The poster takes e from the first layer (``anchor='block0'``); the release anchors on the
               detached patch-embedding output before class token and position embedding
               (``anchor='patch_embed'``), and its negatives are the mean of the *other* patches and a
               7x7-neighbourhood mean in a three-way softmax: not reproduced here.
- mixing:      l_token = 1/n sum_i CE(g(h_i), y_i) with an extra linear head g on each patch token and
               y_i the label of the image patch i came from under patch-grid CutMix. The release instead
               pools the patch tokens of each mixed region, applies g to the pooled token and weights a KL
               term by the region's area.

``patch_cutmix=True`` without ``mixing`` trains on the same patch-grid CutMix with CE alone: the control
that separates what the mixing loss adds from what its augmentation adds.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from timm.data.mixup import cutmix_bbox_and_lam
from torch import nn

from repro.functions import register
from repro.probes.diversity import num_patches, patch_cosine_similarity

TERMS = ("cos", "contrastive", "mixing")
COS_FORMS = ("signed", "absolute")


def cosine_loss(h: torch.Tensor, form: str = "signed") -> torch.Tensor:
    """l_cos over (B, n, D) patch tokens, mean over the batch: CosSim ('signed', the poster) or the mean
    absolute pairwise cosine ('absolute', the arXiv paper)."""
    if form == "signed":
        return patch_cosine_similarity(h).mean()
    if form != "absolute":
        raise ValueError(f"cos_form={form!r}; choose one of {COS_FORMS}")
    u = F.normalize(h.float(), dim=-1)
    n = u.shape[-2]
    gram = (u @ u.transpose(-2, -1)).abs()
    return ((gram.sum(dim=(-2, -1)) - gram.diagonal(dim1=-2, dim2=-1).sum(dim=-1)) / (n * (n - 1))).mean()


def patch_contrastive_loss(e: torch.Tensor, h: torch.Tensor, negatives: str = "mean") -> torch.Tensor:
    """l_cons for (B, n, D) first-layer e (detached here) and last-layer h patch tokens, mean over the batch.

    'mean': the poster's two-way softmax of e_i^T h_i against e_i^T hbar; 'patches': InfoNCE over all h_j.
    """
    if e.shape != h.shape:
        raise ValueError(f"patch_contrastive_loss: e {tuple(e.shape)} and h {tuple(h.shape)} must match "
                         "(same patch tokens of the first and the last layer)")
    e = e.detach()
    if negatives == "mean":
        positive = (e * h).sum(dim=-1)                                 # (B, n): e_i^T h_i
        against = (e * h.mean(dim=1, keepdim=True)).sum(dim=-1)        # e_i^T hbar
        return -torch.stack([positive, against], dim=-1).log_softmax(dim=-1)[..., 0].mean()
    if negatives == "patches":
        logits = e @ h.transpose(1, 2)                                 # (B, n, n): e_i^T h_j
        return -logits.log_softmax(dim=-1).diagonal(dim1=-2, dim2=-1).mean()
    raise ValueError(f"patch_contrastive_loss: negatives={negatives!r}; choose 'mean' (poster) or 'patches'")


@dataclass
class PatchMix:
    """Patch-grid CutMix: mixed images, image-level and per-patch soft targets, and where patches came from.

    ``mask`` (B, gh, gw) is 1 where the patch is the image's own and 0 where it comes from image ``perm[b]``;
    ``lam`` (B,) is the share of own patches, the weight of the own label in ``targets``.
    """
    images: torch.Tensor
    targets: torch.Tensor
    patch_targets: torch.Tensor
    mask: torch.Tensor
    perm: torch.Tensor
    lam: torch.Tensor


def _soft(targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    if targets.dim() == 1:
        return F.one_hot(targets.long(), num_classes).float()
    if targets.dim() == 2 and targets.shape[1] == num_classes:
        return targets.float()
    raise ValueError(f"targets of shape {tuple(targets.shape)}: give class indices (B,) or probabilities "
                     f"(B, {num_classes}), e.g. from timm's Mixup")


def random_patch_mask(grid: tuple[int, int], alpha: float = 1.0) -> torch.Tensor:
    """(gh, gw) mask, 1 outside one CutMix box on the patch grid (timm's box, lam ~ Beta(alpha, alpha))."""
    (yl, yh, xl, xh), _ = cutmix_bbox_and_lam(grid, np.random.beta(alpha, alpha))
    mask = torch.ones(grid)
    mask[yl:yh, xl:xh] = 0
    return mask


def patch_cutmix(images: torch.Tensor, targets: torch.Tensor, patch_size: int | tuple[int, int],
                 num_classes: int, alpha: float = 1.0, mask: torch.Tensor | None = None,
                 perm: torch.Tensor | None = None) -> PatchMix:
    """CutMix whose box snaps to the patch grid, so every patch token has exactly one source image.

    ``targets``: class indices or soft (mixup) targets. ``mask`` ((gh, gw) or (B, gh, gw); 1 = own patch)
    and ``perm`` default to one random box per batch, as timm's CutMix and the release do, and a random
    pairing. Image-level target = lam y_b + (1 - lam) y_perm[b]; per-patch target = the source's label.
    """
    ph, pw = (patch_size, patch_size) if isinstance(patch_size, int) else patch_size
    b, _, hgt, wid = images.shape
    if hgt % ph or wid % pw:
        raise ValueError(f"images {hgt}x{wid} do not tile into {ph}x{pw} patches")
    grid = (hgt // ph, wid // pw)
    mask = random_patch_mask(grid, alpha) if mask is None else mask
    mask = mask.to(images.device, torch.float32).expand(b, *grid)
    perm = torch.randperm(b, device=images.device) if perm is None else perm.to(images.device)
    pixel = mask.repeat_interleave(ph, dim=1).repeat_interleave(pw, dim=2)[:, None].to(images.dtype)
    mixed = pixel * images + (1 - pixel) * images[perm]
    y = _soft(targets, num_classes)
    own = mask.flatten(1)[..., None]                                    # (B, n, 1)
    patch_targets = own * y[:, None] + (1 - own) * y[perm][:, None]
    lam = mask.flatten(1).mean(dim=1)
    return PatchMix(mixed, lam[:, None] * y + (1 - lam[:, None]) * y[perm], patch_targets, mask, perm, lam)


def patch_mixing_loss(patch_logits: torch.Tensor, patch_targets: torch.Tensor) -> torch.Tensor:
    """l_token: CE of (B, n, C) patch-head logits against (B, n, C) per-patch soft targets, mean over patches."""
    return F.cross_entropy(patch_logits.flatten(0, 1), patch_targets.flatten(0, 1))


@contextmanager
def _outputs(**modules: nn.Module):
    """Keep each named module's output (with its graph) in the yielded dict."""
    out = {}
    handles = [m.register_forward_hook(lambda mod, args, res, k=k: out.__setitem__(k, res))
               for k, m in modules.items()]
    try:
        yield out
    finally:
        for h in handles:
            h.remove()


@register("oversmoothing.anti_oversmoothing_loss")
class AntiOversmoothingLoss(nn.Module):
    """The training loss with any of the three terms: CE + sum_k w_k l_k, computed from one forward pass.

    Call ``loss, terms = aos(images, targets)`` in place of ``criterion(model(images), targets)``: with
    ``mixing`` the images and targets are first patch-CutMixed, so the module runs the model itself.
    ``terms`` holds 'ce' and each enabled term. ``criterion`` must accept soft (B, C) targets when mixing
    is on (the default, F.cross_entropy, takes both). The model is held by reference, not as a
    submodule: this module's parameters are the patch head g alone, to be added to the optimiser.
    """

    def __init__(self, model: nn.Module, num_classes: int, cos: bool = False, contrastive: bool = True,
                 mixing: bool = True, weights: dict[str, float] | None = None, anchor: str = "block0",
                 negatives: str = "mean", cutmix_alpha: float = 1.0, cos_form: str = "signed",
                 patch_cutmix: bool | None = None,
                 criterion: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None):
        super().__init__()
        if anchor not in ("block0", "patch_embed"):
            raise ValueError(f"anchor={anchor!r}; choose 'block0' (poster: first layer) or 'patch_embed' (release)")
        if cos_form not in COS_FORMS:
            raise ValueError(f"cos_form={cos_form!r}; choose one of {COS_FORMS}")
        weights = dict(weights or {})
        unknown = set(weights) - set(TERMS)
        if unknown:
            raise ValueError(f"weights for unknown terms {sorted(unknown)}; terms are {TERMS}")
        self.__dict__["model"] = model  # plain reference: keeps the backbone out of parameters()/state_dict()
        self.num_classes = num_classes
        self.enabled = {"cos": cos, "contrastive": contrastive, "mixing": mixing}
        if patch_cutmix is False and mixing:
            raise ValueError("mixing=True needs the patch-grid CutMix (patch_cutmix=False turns it off)")
        self.mix_patches = mixing if patch_cutmix is None else patch_cutmix
        self.weights = {k: float(weights.get(k, 1.0)) for k in TERMS}
        self.anchor, self.negatives, self.cutmix_alpha, self.cos_form = anchor, negatives, cutmix_alpha, cos_form
        self.criterion = criterion or F.cross_entropy
        self.num_patches = num_patches(model)
        self.patch_head = nn.Linear(model.embed_dim, num_classes) if mixing else None

    def forward(self, images: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        mix = None
        if self.mix_patches:
            mix = patch_cutmix(images, targets, self.model.patch_embed.patch_size, self.num_classes,
                               self.cutmix_alpha)
            images, targets = mix.images, mix.targets
        first = self.model.blocks[0] if self.anchor == "block0" else self.model.patch_embed
        with _outputs(first=first, last=self.model.norm) as feats:
            logits = self.model(images)
        h = feats["last"][:, -self.num_patches:]
        terms = {"ce": self.criterion(logits, targets)}
        if self.enabled["cos"]:
            terms["cos"] = cosine_loss(h, self.cos_form)
        if self.enabled["contrastive"]:
            terms["contrastive"] = patch_contrastive_loss(feats["first"][:, -self.num_patches:], h, self.negatives)
        if self.enabled["mixing"]:
            terms["mixing"] = patch_mixing_loss(self.patch_head(h), mix.patch_targets)
        total = terms["ce"] + sum(self.weights[k] * v for k, v in terms.items() if k != "ce")
        return total, terms
