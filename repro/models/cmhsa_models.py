"""CMHSA models registered with timm (Li et al. 2021, Sec. 4.1 and Table 1).

Paper setting (CIFAR-100 at 224 px, patch 16): 6 pre-LN layers, token dim 768 = 16*16*3 (identity patch
embedding), FFN 3072, GAP head, no absolute position embedding.
- ``repro_cmhsa_{3,5}_conv``: convolution phase, each MHSA replaced by a KxK conv (``conv_phase.py``).
- ``repro_cmhsa_attn``: self-attention phase, 9 heads of size 768 with relative position bias; the
  target of ``transfer.conv_to_mhsa`` and, randomly initialised, Table 1's "CMHSA (2nd phase)".
``*_c32`` variants: 32 px, patch 8 -> 192 dims, 4x4 = 16 tokens, 9 heads of size 192, FFN 768. Corollary 4
(9 heads suffice iff K <= 2P + 1) holds at patch 8 for K = 3 and 5 (it needs P >= 1 and P >= 2).

Every name takes timm.create_model keyword overrides (img_size, patch_size, in_chans, depth, num_classes,
mlp_ratio, drop_path_rate, ...); embed_dim follows patch_size^2 * in_chans and the head size follows
embed_dim unless given.
"""
from __future__ import annotations

from timm.models import generate_default_cfgs, register_model

from .conv_phase import conv_phase_vit
from .factory import build, pretrained_cfg
from .vit import VisionTransformer

PAPER = dict(img_size=224, patch_size=16, in_chans=3, num_classes=100, depth=6, mlp_ratio=4.0)
SMALL = dict(PAPER, img_size=32, patch_size=8)
# first_conv: the identity patch embedding has no weights, so the first layer to see the pixels' values is
# the first block's convolution (1st phase) or its query/key/value projection (2nd phase)
FIRST = {"conv": "blocks.0.attn.conv", "attn": "blocks.0.attn.qkv"}
default_cfgs = generate_default_cfgs({
    f"repro_cmhsa_{kind}{suffix}": pretrained_cfg(f"{row} (CMHSA Table 1){note}", "cmhsa", size["img_size"],
                                                  size["num_classes"], first_conv=FIRST[kind.rpartition("_")[2]])
    for kind, row in (("3_conv", "CMHSA-3 (1st phase)"), ("5_conv", "CMHSA-5 (1st phase)"),
                      ("attn", "CMHSA (2nd phase)"))
    for suffix, size, note in (("", PAPER, ""), ("_c32", SMALL, ", at 32 px / patch 8"))})


def _build(name: str, builder, defaults: dict, pretrained: bool, kwargs: dict):
    """Merge overrides into ``defaults`` and build (on ``device`` if given, e.g. 'meta' to count parameters)."""
    refusal = (f"{name} has no pretrained weights: train the convolution phase and transfer it "
               "(repro.models.transfer.conv_to_mhsa)")
    return build(name, builder, defaults, kwargs, pretrained, refusal)


def _attention_phase(**cfg) -> VisionTransformer:
    dim = cfg["patch_size"] ** 2 * cfg["in_chans"]
    cfg.setdefault("embed_dim", dim)
    cfg.setdefault("head_dim", cfg["embed_dim"])
    cfg.setdefault("num_heads", 9)
    cfg.setdefault("global_pool", "avg")
    cfg.setdefault("class_token", False)
    return VisionTransformer(attn="relpos", patch_embed="identity", pos_embed="none", **cfg)


@register_model
def repro_cmhsa_3_conv(pretrained: bool = False, **kwargs) -> VisionTransformer:
    return _build("repro_cmhsa_3_conv", conv_phase_vit, dict(PAPER, kernel_size=3), pretrained, kwargs)


@register_model
def repro_cmhsa_5_conv(pretrained: bool = False, **kwargs) -> VisionTransformer:
    return _build("repro_cmhsa_5_conv", conv_phase_vit, dict(PAPER, kernel_size=5), pretrained, kwargs)


@register_model
def repro_cmhsa_attn(pretrained: bool = False, **kwargs) -> VisionTransformer:
    return _build("repro_cmhsa_attn", _attention_phase, PAPER, pretrained, kwargs)


@register_model
def repro_cmhsa_3_conv_c32(pretrained: bool = False, **kwargs) -> VisionTransformer:
    return _build("repro_cmhsa_3_conv_c32", conv_phase_vit, dict(SMALL, kernel_size=3), pretrained, kwargs)


@register_model
def repro_cmhsa_5_conv_c32(pretrained: bool = False, **kwargs) -> VisionTransformer:
    return _build("repro_cmhsa_5_conv_c32", conv_phase_vit, dict(SMALL, kernel_size=5), pretrained, kwargs)


@register_model
def repro_cmhsa_attn_c32(pretrained: bool = False, **kwargs) -> VisionTransformer:
    return _build("repro_cmhsa_attn_c32", _attention_phase, SMALL, pretrained, kwargs)
