"""Build our equivalent of a timm DeiT/ViT or ConViT model and load its weights (parameter names match)."""
from __future__ import annotations

from torch import nn

from .vit import VisionTransformer


def config_from_timm(model: nn.Module) -> dict:
    """VisionTransformer kwargs describing a timm ``VisionTransformer`` or ``ConVit`` instance."""
    kind = type(model).__name__
    if kind not in ("VisionTransformer", "ConVit"):
        raise TypeError(f"from_timm supports timm VisionTransformer (DeiT/ViT) and ConVit, not {kind}")
    blk = model.blocks[0]
    pe = model.patch_embed
    dim = model.embed_dim
    cfg = dict(img_size=pe.img_size[0], patch_size=pe.patch_size[0], in_chans=pe.proj.in_channels,
               num_classes=model.num_classes, embed_dim=dim, depth=len(model.blocks),
               num_heads=blk.attn.num_heads, mlp_ratio=blk.mlp.fc1.out_features / dim,
               norm_eps=model.norm.eps)
    if kind == "ConVit":
        last = model.blocks[-1].attn
        cfg.update(gpsa_layers=model.local_up_to_layer, qkv_bias=last.qkv.bias is not None,
                   locality_strength=blk.attn.locality_strength)
    else:
        if model.global_pool != "token" or not isinstance(model.fc_norm, nn.Identity):
            raise ValueError("from_timm: only class-token ViTs without fc_norm are supported")
        cfg.update(qkv_bias=blk.attn.qkv.bias is not None)
    return cfg


def from_timm(model: nn.Module) -> VisionTransformer:
    """Our model with the same architecture and weights as the given timm model (strict load)."""
    ours = VisionTransformer(**config_from_timm(model))
    ours.load_state_dict(model.state_dict(), strict=True)
    return ours.train(model.training)
