"""Named configs for every model row the five papers report, registered with timm.

Each name is a small ``@register_model`` function, as timm's own models are. ``MODELS`` holds each name's
paper, constructor arguments (``architecture`` reads them too) and description, from which its pretrained
cfg is made (``default_cfgs``: input size, mean/std, crop, the paper and table; no weights, see
factory.py); the function's docstring repeats the description (tests/test_model_registry.py holds the two
equal). Any argument can be overridden through ``timm.create_model(name, **kwargs)`` (img_size,
patch_size, depth, num_classes, ...). Sources: ConViT Table 1 (heads/dim), CMHSA Table 1, Aug-ViT Table 2
and its official release, patch-diversification Tables 2-5, Res-Post-LN
supplement Table 1.
"""
from __future__ import annotations

import inspect

from timm.models import generate_default_cfgs, register_model

from .factory import build, pretrained_cfg
from .vit import VisionTransformer

DEIT = dict(qkv_bias=True)  # DeiT (Touvron et al. 2021) and ConViT's wider "+" DeiT baselines
CONVIT = dict(qkv_bias=False, gpsa_layers=10, locality_strength=1.0)
C32 = dict(img_size=32, patch_size=4, num_classes=10)  # the tiny/small scales' CIFAR size: patch 4, 8x8 grid
AUG = dict(aug_paths=2, aug_mlp=True, aug_scale=0.75)  # Aug-ViT's release: T = 2 paths on MSA and MLP, sum x 3/4

MODELS: dict[str, tuple[str, dict, str]] = {  # name -> (paper id, constructor arguments, description)
    # ConViT Table 1: DeiT and ConViT at each size, and the wider "+" models
    "repro_deit_tiny": ("convit", dict(DEIT, embed_dim=192, num_heads=3),
                        "DeiT-tiny: dim 192, 3 heads (ConViT Table 1)."),
    "repro_convit_tiny": ("convit", dict(CONVIT, embed_dim=192, num_heads=4),
                          "ConViT-tiny: dim 192, 4 heads, 10 GPSA + 2 MHSA blocks (ConViT Table 1)."),
    "repro_deit_small": ("convit", dict(DEIT, embed_dim=384, num_heads=6),
                         "DeiT-small: dim 384, 6 heads (ConViT Table 1)."),
    "repro_convit_small": ("convit", dict(CONVIT, embed_dim=432, num_heads=9),
                           "ConViT-small: dim 432, 9 heads, 10 GPSA + 2 MHSA blocks (ConViT Table 1)."),
    "repro_deit_base": ("convit", dict(DEIT, embed_dim=768, num_heads=12),
                        "DeiT-base: dim 768, 12 heads (ConViT Table 1)."),
    "repro_convit_base": ("convit", dict(CONVIT, embed_dim=768, num_heads=16),
                          "ConViT-base: dim 768, 16 heads, 10 GPSA + 2 MHSA blocks (ConViT Table 1)."),
    "repro_deit_tiny_plus": ("convit", dict(DEIT, embed_dim=256, num_heads=4),
                             "DeiT-tiny_plus: dim 256, 4 heads (ConViT Table 1)."),
    "repro_convit_tiny_plus": ("convit", dict(CONVIT, embed_dim=256, num_heads=4),
                               "ConViT-tiny_plus: dim 256, 4 heads, 10 GPSA + 2 MHSA blocks (ConViT Table 1)."),
    "repro_deit_small_plus": ("convit", dict(DEIT, embed_dim=576, num_heads=9),
                              "DeiT-small_plus: dim 576, 9 heads (ConViT Table 1)."),
    "repro_convit_small_plus": ("convit", dict(CONVIT, embed_dim=576, num_heads=9),
                                "ConViT-small_plus: dim 576, 9 heads, 10 GPSA + 2 MHSA blocks (ConViT Table 1)."),
    "repro_deit_base_plus": ("convit", dict(DEIT, embed_dim=1024, num_heads=16),
                             "DeiT-base_plus: dim 1024, 16 heads (ConViT Table 1)."),
    "repro_convit_base_plus": ("convit", dict(CONVIT, embed_dim=1024, num_heads=16),
                               "ConViT-base_plus: dim 1024, 16 heads, 10 GPSA + 2 MHSA blocks (ConViT Table 1)."),
    # 32 px variants for the tiny/small scales: the Ti pair's widths and heads at patch 4
    "repro_deit_tiny_c32": ("convit", dict(DEIT, **C32, embed_dim=192, num_heads=3),
                            "DeiT-Ti at 32 px, patch 4: ConViT Table 1's DeiT-Ti scaled to CIFAR."),
    "repro_convit_tiny_c32": ("convit", dict(CONVIT, **C32, embed_dim=192, num_heads=4),
                              "ConViT-Ti at 32 px, patch 4: ConViT Table 1's ConViT-Ti scaled to CIFAR."),
    "repro_convit_tiny9_c32": ("convit", dict(CONVIT, **C32, embed_dim=198, num_heads=9),
                               "ConViT at 32 px with 9 heads (ConViT Table 1's ConViT-S head count: 3x3 conv init "
                               "on integer offsets), width ~ Ti."),
    # CMHSA Table 1's baseline on CIFAR-100 at 224 px (ViT-base and DeiT-base share the architecture; they
    # differ by recipe)
    "repro_vit_base": ("cmhsa", dict(DEIT, embed_dim=768, num_heads=12, num_classes=100),
                       "ViT-base/16 as CMHSA's baseline (CMHSA Table 1, CIFAR-100 head)."),
    # Aug-ViT Table 2
    "repro_augvit_small": ("augvit", dict(DEIT, **AUG, embed_dim=384, num_heads=6),
                           "Aug-ViT-S (Aug-ViT Table 2)."),
    "repro_augvit_base": ("augvit", dict(DEIT, **AUG, embed_dim=768, num_heads=12),
                          "Aug-ViT-B (Aug-ViT Table 2)."),
    # block placements (Res-Post-LN supplement Table 1; Xiong et al. 2020 for Post-LN)
    "repro_deit_small_post_ln": ("respostln", dict(DEIT, embed_dim=384, num_heads=6, norm="post_ln"),
                                 "DeiT-S with post_ln blocks (Res-Post-LN supplement Table 1)."),
    "repro_deit_tiny_post_ln_c32": ("respostln", dict(DEIT, **C32, embed_dim=192, num_heads=3, norm="post_ln"),
                                    "DeiT-Ti at 32 px with post_ln blocks (Res-Post-LN supplement Table 1)."),
    "repro_deit_small_res_post_ln": ("respostln", dict(DEIT, embed_dim=384, num_heads=6, norm="res_post_ln"),
                                     "DeiT-S with res_post_ln blocks (Res-Post-LN supplement Table 1)."),
    "repro_deit_tiny_res_post_ln_c32": ("respostln",
                                        dict(DEIT, **C32, embed_dim=192, num_heads=3, norm="res_post_ln"),
                                        "DeiT-Ti at 32 px with res_post_ln blocks (Res-Post-LN supplement Table 1)."),
    # patch-diversification baselines (Tables 2-5): DeiT-S/B at depth 12 and 24, talking heads
    "repro_deit_small24": ("oversmoothing", dict(DEIT, embed_dim=384, num_heads=6, depth=24),
                           "DeiT-S24 (44M) (patch-diversification Table 2)."),
    "repro_deit_base24": ("oversmoothing", dict(DEIT, embed_dim=768, num_heads=12, depth=24),
                          "DeiT-B24 (172M) (patch-diversification Table 2)."),
    "repro_deit_base_th": ("oversmoothing", dict(DEIT, embed_dim=768, num_heads=12, attn="talking_heads"),
                           "DeiT-B12 with talking-heads attention (patch-diversification Table 2)."),
    "repro_deit_base24_th": ("oversmoothing", dict(DEIT, embed_dim=768, num_heads=12, depth=24, attn="talking_heads"),
                             "DeiT-B24 with talking-heads attention (patch-diversification Table 2)."),
}
# timm's register_model reads each name's cfg from this module's `default_cfgs`, so they come first
default_cfgs = generate_default_cfgs({
    name: pretrained_cfg(doc, paper, img_size=args.get("img_size", 224), num_classes=args.get("num_classes", 1000))
    for name, (paper, args, doc) in MODELS.items()})


def _vit(name: str, pretrained: bool, kwargs: dict) -> VisionTransformer:
    refusal = (f"{name}: vitrepro publishes no pretrained weights; train it (make reproduce) or load timm's "
               "weights into it with repro.models.from_timm(timm.create_model(..., pretrained=True))")
    return build(name, VisionTransformer, MODELS[name][1], kwargs, pretrained, refusal)


def architecture(name: str, kwargs: dict | None = None) -> dict:
    """A registered model's constructor arguments after ``kwargs`` (depth and width included when the
    name leaves them at VisionTransformer's defaults): what a report says was trained. {} if unknown."""
    kwargs = dict(kwargs or {})
    if name not in MODELS and kwargs.get("base") in MODELS:  # a paper's wrapper around a registered model
        name = kwargs["base"]
    if name not in MODELS:
        return {}
    sig = inspect.signature(VisionTransformer.__init__).parameters
    base = {k: p.default for k, p in sig.items() if p.default is not inspect.Parameter.empty}
    return {**base, **MODELS[name][1], **kwargs}


@register_model
def repro_deit_tiny(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-tiny: dim 192, 3 heads (ConViT Table 1)."""
    return _vit("repro_deit_tiny", pretrained, kwargs)


@register_model
def repro_convit_tiny(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ConViT-tiny: dim 192, 4 heads, 10 GPSA + 2 MHSA blocks (ConViT Table 1)."""
    return _vit("repro_convit_tiny", pretrained, kwargs)


@register_model
def repro_deit_small(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-small: dim 384, 6 heads (ConViT Table 1)."""
    return _vit("repro_deit_small", pretrained, kwargs)


@register_model
def repro_convit_small(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ConViT-small: dim 432, 9 heads, 10 GPSA + 2 MHSA blocks (ConViT Table 1)."""
    return _vit("repro_convit_small", pretrained, kwargs)


@register_model
def repro_deit_base(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-base: dim 768, 12 heads (ConViT Table 1)."""
    return _vit("repro_deit_base", pretrained, kwargs)


@register_model
def repro_convit_base(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ConViT-base: dim 768, 16 heads, 10 GPSA + 2 MHSA blocks (ConViT Table 1)."""
    return _vit("repro_convit_base", pretrained, kwargs)


@register_model
def repro_deit_tiny_plus(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-tiny_plus: dim 256, 4 heads (ConViT Table 1)."""
    return _vit("repro_deit_tiny_plus", pretrained, kwargs)


@register_model
def repro_convit_tiny_plus(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ConViT-tiny_plus: dim 256, 4 heads, 10 GPSA + 2 MHSA blocks (ConViT Table 1)."""
    return _vit("repro_convit_tiny_plus", pretrained, kwargs)


@register_model
def repro_deit_small_plus(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-small_plus: dim 576, 9 heads (ConViT Table 1)."""
    return _vit("repro_deit_small_plus", pretrained, kwargs)


@register_model
def repro_convit_small_plus(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ConViT-small_plus: dim 576, 9 heads, 10 GPSA + 2 MHSA blocks (ConViT Table 1)."""
    return _vit("repro_convit_small_plus", pretrained, kwargs)


@register_model
def repro_deit_base_plus(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-base_plus: dim 1024, 16 heads (ConViT Table 1)."""
    return _vit("repro_deit_base_plus", pretrained, kwargs)


@register_model
def repro_convit_base_plus(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ConViT-base_plus: dim 1024, 16 heads, 10 GPSA + 2 MHSA blocks (ConViT Table 1)."""
    return _vit("repro_convit_base_plus", pretrained, kwargs)


@register_model
def repro_deit_tiny_c32(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-Ti at 32 px, patch 4: ConViT Table 1's DeiT-Ti scaled to CIFAR."""
    return _vit("repro_deit_tiny_c32", pretrained, kwargs)


@register_model
def repro_convit_tiny_c32(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ConViT-Ti at 32 px, patch 4: ConViT Table 1's ConViT-Ti scaled to CIFAR."""
    return _vit("repro_convit_tiny_c32", pretrained, kwargs)


@register_model
def repro_convit_tiny9_c32(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ConViT at 32 px with 9 heads (ConViT Table 1's ConViT-S head count: 3x3 conv init on integer offsets), width ~ Ti."""
    return _vit("repro_convit_tiny9_c32", pretrained, kwargs)


@register_model
def repro_vit_base(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """ViT-base/16 as CMHSA's baseline (CMHSA Table 1, CIFAR-100 head)."""
    return _vit("repro_vit_base", pretrained, kwargs)


@register_model
def repro_augvit_small(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Aug-ViT-S (Aug-ViT Table 2)."""
    return _vit("repro_augvit_small", pretrained, kwargs)


@register_model
def repro_augvit_base(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """Aug-ViT-B (Aug-ViT Table 2)."""
    return _vit("repro_augvit_base", pretrained, kwargs)


@register_model
def repro_deit_small_post_ln(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-S with post_ln blocks (Res-Post-LN supplement Table 1)."""
    return _vit("repro_deit_small_post_ln", pretrained, kwargs)


@register_model
def repro_deit_tiny_post_ln_c32(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-Ti at 32 px with post_ln blocks (Res-Post-LN supplement Table 1)."""
    return _vit("repro_deit_tiny_post_ln_c32", pretrained, kwargs)


@register_model
def repro_deit_small_res_post_ln(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-S with res_post_ln blocks (Res-Post-LN supplement Table 1)."""
    return _vit("repro_deit_small_res_post_ln", pretrained, kwargs)


@register_model
def repro_deit_tiny_res_post_ln_c32(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-Ti at 32 px with res_post_ln blocks (Res-Post-LN supplement Table 1)."""
    return _vit("repro_deit_tiny_res_post_ln_c32", pretrained, kwargs)


@register_model
def repro_deit_small24(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-S24 (44M) (patch-diversification Table 2)."""
    return _vit("repro_deit_small24", pretrained, kwargs)


@register_model
def repro_deit_base24(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-B24 (172M) (patch-diversification Table 2)."""
    return _vit("repro_deit_base24", pretrained, kwargs)


@register_model
def repro_deit_base_th(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-B12 with talking-heads attention (patch-diversification Table 2)."""
    return _vit("repro_deit_base_th", pretrained, kwargs)


@register_model
def repro_deit_base24_th(pretrained: bool = False, **kwargs) -> VisionTransformer:
    """DeiT-B24 with talking-heads attention (patch-diversification Table 2)."""
    return _vit("repro_deit_base24_th", pretrained, kwargs)
