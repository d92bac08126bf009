"""Aug-ViT with unconstrained dense projections on its augmented shortcuts: the ablation baseline for the
block-circulant Theta (paper Sec. 3.3: the circulant structure is there to make T_i cheap).

A ``CirculantLinear`` whose circulant blocks are 1 x 1 is an ordinary d x d matrix (d^2 free weights), so
the dense ablation keeps every other part of the core's shortcut (GELU, bias, aug_scale) and changes the
structure of Theta. Its init is the release's for its dense variant ('linear2' in the official
vision_transformer.py: nn.Linear re-initialised by the ViT's _init_weights, trunc-normal std 0.02, bias 0).
The core's Block does not take a block count, so the paths are swapped after construction; an
``aug_blocks`` constructor argument on the core Block would make this a plain config. Its timm cfg is the
base model's (input size, crop, classes) under this name and its own description.
"""
from __future__ import annotations

import timm
from timm.layers import trunc_normal_
from timm.models import generate_default_cfgs, register_model
from torch import nn

from repro.models import AugmentedShortcut  # also registers the repro_* names with timm
from repro.models.factory import pretrained_cfg

DESCRIPTION = "Aug-ViT with dense d x d shortcut projections: the ablation of the block-circulant Theta (Sec. 3.3)."
default_cfgs = generate_default_cfgs({"augvit_dense_proj": pretrained_cfg(DESCRIPTION, "augvit", 32, 10)})


@register_model
def augvit_dense_proj(pretrained: bool = False, base: str = "repro_deit_tiny_c32", **kwargs):
    """``base`` built with Aug-ViT shortcuts (``aug_paths`` > 0 in kwargs), each path a dense d x d projection."""
    if not kwargs.get("aug_paths"):
        raise ValueError("augvit_dense_proj: give aug_paths > 0 (the number of augmented paths T)")
    model = timm.create_model(base, pretrained=pretrained, **kwargs)  # pretrained=True: the base refuses it
    model.pretrained_cfg = model.default_cfg = {**model.pretrained_cfg, "architecture": "augvit_dense_proj",
                                                 "description": DESCRIPTION}
    core = model.model if kwargs.get("features_only") else model  # timm's FeatureGetterNet wraps the model
    for blk in core.blocks:
        for name in ("aug_attn", "aug_mlp"):
            shortcut = getattr(blk, name)
            if shortcut is not None:
                dim = shortcut.paths[0].in_features
                dense = AugmentedShortcut(dim, len(shortcut.paths), num_blocks=dim, fft=False)
                for path in dense.paths:
                    trunc_normal_(path.weight, std=0.02)
                    nn.init.zeros_(path.bias)
                setattr(blk, name, dense)
    return model
