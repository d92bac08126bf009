"""One factory behind every registered name: timm's ``build_model_with_cfg`` with a pretrained cfg per name.

The cfgs hold no weights. Each says what its model takes and which paper table it comes from, so that
timm's data helpers (``resolve_data_config``, ``create_transform``) build the model's pipeline and timm's
tools (``features_only=True``, ``list_models(name_matches_cfg=True)``) work on it:
- input size, and the classes of the dataset the paper trains that row on;
- mean/std: the ImageNet statistics, which DeiT and ConViT use for every dataset (repro/conf/data/*.yaml);
- crop: 1.0 at 32 px (CIFAR is evaluated uncropped), DeiT's 0.875 above, as repro.data's eval transform;
- bicubic interpolation (DeiT); ``classifier`` and ``first_conv`` (for CMHSA's identity patch embedding, the
  first layer with weights that sees the pixels);
- ``paper_name`` / ``paper_ids`` (the paper) and ``description`` (its table and row).
A model built at another size gets a cfg with its own input size and that size's crop.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Callable

import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.layers import to_2tuple
from timm.models import build_model_with_cfg, get_pretrained_cfg
from torch import nn

PAPERS = {  # the ids of papers/<id>/paper.yaml -> (short name, arXiv id)
    "convit": ("ConViT (d'Ascoli et al., ICML 2021)", "arXiv:2103.10697"),
    "cmhsa": ("Can Vision Transformers Perform Convolution? (Li et al. 2021)", "arXiv:2111.01353"),
    "oversmoothing": ("Vision Transformers with Patch Diversification (Gong et al. 2021)", "arXiv:2104.12753"),
    "augvit": ("Augmented Shortcuts for Vision Transformers (Tang et al., NeurIPS 2021)", "arXiv:2106.15941"),
    "respostln": ("Res-Post-LN (Kim & Kim, ACCV 2022, supplement)", None),
}


def crop_pct(img_size: int | tuple[int, int]) -> float:
    """Centre-crop fraction at evaluation: none for CIFAR-sized images, DeiT's 0.875 above."""
    return 1.0 if max(to_2tuple(img_size)) <= 32 else 0.875


def pretrained_cfg(description: str, paper: str, img_size: int = 224, num_classes: int = 1000,
                   first_conv: str = "patch_embed.proj") -> dict:
    """A weightless timm pretrained cfg for a model of ``paper`` (a key of PAPERS) taking ``img_size`` px."""
    name, arxiv = PAPERS[paper]
    return dict(input_size=(3, img_size, img_size), fixed_input_size=True, interpolation="bicubic",
                crop_pct=crop_pct(img_size), mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD,
                num_classes=num_classes, first_conv=first_conv, classifier="head", paper_name=name,
                paper_ids=arxiv, description=description)


def build(name: str, builder: Callable[..., nn.Module], defaults: dict, kwargs: dict, pretrained: bool,
          refusal: str) -> nn.Module:
    """``builder(**{**defaults, **kwargs})`` through timm's ``build_model_with_cfg``, with ``name``'s cfg
    (its input size and crop following the model's ``img_size``); ``pretrained=True`` raises ``refusal``.

    ``device`` (e.g. 'meta', to count parameters without weights) builds there; ``out_indices`` picks the
    blocks ``features_only=True`` returns (default: the last three, as timm's ViT).
    """
    if pretrained:
        raise ValueError(refusal)
    cfg = {**defaults, **kwargs}
    device = cfg.pop("device", None)
    registered = get_pretrained_cfg(name)
    img_size = cfg.setdefault("img_size", registered.input_size[-1])  # an int, not the cfg's (H, W)
    input_size = (cfg.get("in_chans", 3), *to_2tuple(img_size))
    if input_size != tuple(registered.input_size):
        cfg["pretrained_cfg_overlay"] = {"input_size": input_size, "crop_pct": crop_pct(img_size),
                                         **(cfg.get("pretrained_cfg_overlay") or {})}
    feature_cfg = dict(out_indices=cfg.pop("out_indices", min(3, cfg.get("depth", 12))), feature_cls="getter")
    with torch.device(device) if device is not None else nullcontext():
        return build_model_with_cfg(builder, name, pretrained=False, feature_cfg=feature_cfg, **cfg)
