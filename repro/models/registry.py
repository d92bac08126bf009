"""Named configs for every model row the five papers report, registered with timm.

Each function only sets hyperparameters (timm's ``register_model`` idiom); any of them can be
overridden through ``timm.create_model(name, **kwargs)`` (img_size, patch_size, depth, num_classes, ...).
Each name has a pretrained cfg (``default_cfgs``: input size, mean/std, crop, the paper and table; no
weights, see factory.py). Sources: ConViT Table 1 (heads/dim), CMHSA Table 1, Aug-ViT Table 2 and the
release notes in ../shared/papers/README.md, patch-diversification Tables 2-5, Res-Post-LN supplement Table 1.
"""
from __future__ import annotations

import inspect

from timm.models import generate_default_cfgs, register_model

from .factory import build, pretrained_cfg
from .vit import VisionTransformer

_NAMES: dict[str, tuple[dict, str, str]] = {}  # name -> (defaults, doc, paper id)


def _add(name: str, defaults: dict, doc: str, paper: str) -> None:
    _NAMES[name] = (defaults, doc, paper)


# DeiT (Touvron et al. 2021) and ConViT's wider "+" DeiT baselines (ConViT Table 1).
DEIT = dict(qkv_bias=True)
CONVIT = dict(qkv_bias=False, gpsa_layers=10, locality_strength=1.0)
SIZES = {  # size -> (embed_dim, heads) for DeiT and ConViT
    "tiny": ((192, 3), (192, 4)),
    "small": ((384, 6), (432, 9)),
    "base": ((768, 12), (768, 16)),
    "tiny_plus": ((256, 4), (256, 4)),
    "small_plus": ((576, 9), (576, 9)),
    "base_plus": ((1024, 16), (1024, 16)),
}

for _size, ((_dd, _dh), (_cd, _ch)) in SIZES.items():
    _add(f"repro_deit_{_size}", dict(**DEIT, embed_dim=_dd, num_heads=_dh),
         f"DeiT-{_size}: dim {_dd}, {_dh} heads (ConViT Table 1).", "convit")
    _add(f"repro_convit_{_size}", dict(**CONVIT, embed_dim=_cd, num_heads=_ch),
         f"ConViT-{_size}: dim {_cd}, {_ch} heads, 10 GPSA + 2 MHSA blocks (ConViT Table 1).", "convit")

# 32 px variants for the tiny/small scales: same widths and heads as the Ti pair, patch 4 (8x8 grid).
C32 = dict(img_size=32, patch_size=4, num_classes=10)
_add("repro_deit_tiny_c32", dict(**DEIT, **C32, embed_dim=192, num_heads=3),
     "DeiT-Ti at 32 px, patch 4: ConViT Table 1's DeiT-Ti scaled to CIFAR.", "convit")
_add("repro_convit_tiny_c32", dict(**CONVIT, **C32, embed_dim=192, num_heads=4),
     "ConViT-Ti at 32 px, patch 4: ConViT Table 1's ConViT-Ti scaled to CIFAR.", "convit")
_add("repro_convit_tiny9_c32", dict(**CONVIT, **C32, embed_dim=198, num_heads=9),
     "ConViT at 32 px with 9 heads (ConViT Table 1's ConViT-S head count: 3x3 conv init on integer offsets), "
     "width ~ Ti.", "convit")

# CMHSA Table 1 baselines on CIFAR-100 at 224 px (ViT-base and DeiT-base share the architecture;
# they differ by recipe).
_add("repro_vit_base", dict(**DEIT, embed_dim=768, num_heads=12, num_classes=100),
     "ViT-base/16 as CMHSA's baseline (CMHSA Table 1, CIFAR-100 head).", "cmhsa")

# Aug-ViT (release: T = 2 augmented paths on MSA and MLP, 4x4 circulant blocks, sum scaled by 3/4).
AUG = dict(aug_paths=2, aug_mlp=True, aug_scale=0.75)
_add("repro_augvit_small", dict(**DEIT, **AUG, embed_dim=384, num_heads=6), "Aug-ViT-S (Aug-ViT Table 2).", "augvit")
_add("repro_augvit_base", dict(**DEIT, **AUG, embed_dim=768, num_heads=12), "Aug-ViT-B (Aug-ViT Table 2).", "augvit")

# Block-placement variants (Res-Post-LN supplement Table 1; Xiong et al. 2020 for Post-LN).
for _norm in ("post_ln", "res_post_ln"):
    _add(f"repro_deit_small_{_norm}", dict(**DEIT, embed_dim=384, num_heads=6, norm=_norm),
         f"DeiT-S with {_norm} blocks (Res-Post-LN supplement Table 1).", "respostln")
    _add(f"repro_deit_tiny_{_norm}_c32", dict(**DEIT, **C32, embed_dim=192, num_heads=3, norm=_norm),
         f"DeiT-Ti at 32 px with {_norm} blocks (Res-Post-LN supplement Table 1).", "respostln")

# Patch-diversification baselines (Tables 2-5): DeiT-S/B at depth 12 and 24, talking heads.
_add("repro_deit_small24", dict(**DEIT, embed_dim=384, num_heads=6, depth=24),
     "DeiT-S24 (44M) (patch-diversification Table 2).", "oversmoothing")
_add("repro_deit_base24", dict(**DEIT, embed_dim=768, num_heads=12, depth=24),
     "DeiT-B24 (172M) (patch-diversification Table 2).", "oversmoothing")
_add("repro_deit_base_th", dict(**DEIT, embed_dim=768, num_heads=12, attn="talking_heads"),
     "DeiT-B12 with talking-heads attention (patch-diversification Table 2).", "oversmoothing")
_add("repro_deit_base24_th", dict(**DEIT, embed_dim=768, num_heads=12, depth=24, attn="talking_heads"),
     "DeiT-B24 with talking-heads attention (patch-diversification Table 2).", "oversmoothing")

# timm's register_model reads each name's cfg from this module's `default_cfgs`, so they come first.
default_cfgs = generate_default_cfgs({
    name: pretrained_cfg(doc, paper, img_size=d.get("img_size", 224), num_classes=d.get("num_classes", 1000))
    for name, (d, doc, paper) in _NAMES.items()})


def _register(name: str, defaults: dict, doc: str) -> None:
    refusal = (f"{name}: vitrepro publishes no pretrained weights; train it (make reproduce) or load timm's "
               "weights into it with repro.models.from_timm(timm.create_model(..., pretrained=True))")

    def fn(pretrained: bool = False, **kwargs) -> VisionTransformer:
        return build(name, VisionTransformer, defaults, kwargs, pretrained, refusal)
    fn.__name__ = name
    fn.__doc__ = doc
    fn.__module__ = __name__
    register_model(fn)
    globals()[name] = fn


for _name, (_defaults, _doc, _) in _NAMES.items():
    _register(_name, _defaults, _doc)


def architecture(name: str, kwargs: dict | None = None) -> dict:
    """A registered model's constructor arguments after ``kwargs`` (depth and width included when the
    name leaves them at VisionTransformer's defaults): what a report says was trained. {} if unknown."""
    kwargs = dict(kwargs or {})
    if name not in _NAMES and kwargs.get("base") in _NAMES:  # a paper's wrapper around a registered model
        name = kwargs["base"]
    if name not in _NAMES:
        return {}
    sig = inspect.signature(VisionTransformer.__init__).parameters
    base = {k: p.default for k, p in sig.items() if p.default is not inspect.Parameter.empty}
    return {**base, **_NAMES[name][0], **kwargs}
