"""One Vision Transformer for all five papers; variants are constructor arguments (timm style).

- ``attn``: 'mhsa' (SDPA) | 'relpos' (learned relative position bias, CMHSA) | 'talking_heads';
  ``gpsa_layers`` = n makes the first n blocks GPSA (ConViT: 10 of 12).
- ``norm``: 'pre_ln' | 'post_ln' | 'res_post_ln' (see blocks.py); ``aug_paths``: Aug-ViT shortcuts.
- ``global_pool``: 'token' (class token) | 'avg' (GAP over patch tokens, CMHSA).
- ``patch_embed``: 'conv' (timm PatchEmbed) | 'identity' (raw flattened patches, CMHSA).
- ``attn_layer``: a factory (dim, grid) -> module replacing attention in every block (CMHSA conv phase).
- ``pos_embed``: 'learned' | 'none'. With GPSA layers the class token joins after the last GPSA block
  and the absolute position embedding covers patches only (as ConViT); otherwise it covers the class
  token too (as DeiT).
"""
from __future__ import annotations

from functools import partial
from typing import Callable

import torch
from timm.layers import PatchEmbed, trunc_normal_
from torch import nn

from .attention import Attention, TalkingHeadsAttention
from .blocks import Block
from .gpsa import GPSA
from .patches import IdentityPatchEmbed

ATTENTIONS = ("mhsa", "relpos", "talking_heads")


class VisionTransformer(nn.Module):
    def __init__(self, img_size: int = 224, patch_size: int = 16, in_chans: int = 3, num_classes: int = 1000,
                 embed_dim: int = 768, depth: int = 12, num_heads: int = 12, head_dim: int | None = None,
                 mlp_ratio: float = 4.0, qkv_bias: bool = True, attn: str = "mhsa", gpsa_layers: int = 0,
                 locality_strength: float = 1.0, local_init: bool = True, gating_init: float = 1.0,
                 train_gating: bool = True, freeze_gpsa: bool = False, norm: str = "pre_ln",
                 aug_paths: int = 0, aug_mlp: bool = True, aug_scale: float = 1.0, aug_fft: bool = True,
                 global_pool: str = "token", patch_embed: str = "conv", pos_embed: str = "learned",
                 drop_rate: float = 0.0, attn_drop_rate: float = 0.0, proj_drop_rate: float = 0.0,
                 drop_path_rate: float = 0.0, norm_eps: float = 1e-6,
                 attn_layer: Callable[[int, tuple[int, int]], nn.Module] | None = None):
        super().__init__()
        if attn not in ATTENTIONS:
            raise ValueError(f"unknown attention {attn!r}; choose one of {ATTENTIONS} (GPSA via gpsa_layers)")
        if global_pool not in ("token", "avg"):
            raise ValueError(f"unknown global_pool {global_pool!r}; choose 'token' or 'avg'")
        if not 0 <= gpsa_layers <= depth:
            raise ValueError(f"gpsa_layers={gpsa_layers} must lie in [0, depth={depth}]; pass gpsa_layers with depth")
        if gpsa_layers == depth and global_pool == "token":
            raise ValueError(f"all {depth} blocks are GPSA, so a class token joining after them would never see a "
                             f"patch; keep at least one MHSA block or use global_pool='avg'")
        self.num_classes = num_classes
        self.global_pool = global_pool
        self.embed_dim = self.num_features = embed_dim
        norm_layer = partial(nn.LayerNorm, eps=norm_eps)

        if patch_embed == "conv":
            self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        elif patch_embed == "identity":
            self.patch_embed = IdentityPatchEmbed(img_size, patch_size, in_chans)
            if self.patch_embed.embed_dim != embed_dim:
                raise ValueError(f"identity patch embedding gives {self.patch_embed.embed_dim} dims "
                                 f"(patch {patch_size}^2 x {in_chans} channels), not embed_dim={embed_dim}")
        else:
            raise ValueError(f"unknown patch_embed {patch_embed!r}; choose 'conv' or 'identity'")
        grid = tuple(self.patch_embed.grid_size)
        num_patches = grid[0] * grid[1]
        self.grid_size = grid

        self.num_prefix_tokens = 1 if global_pool == "token" else 0
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if self.num_prefix_tokens else None
        # ConViT inserts the class token after its GPSA blocks; DeiT before the first block.
        self.cls_insert_at = gpsa_layers if (self.cls_token is not None and gpsa_layers) else 0
        pos_tokens = num_patches + (self.num_prefix_tokens if self.cls_insert_at == 0 else 0)
        self.pos_embed = nn.Parameter(torch.zeros(1, pos_tokens, embed_dim)) if pos_embed == "learned" else None
        if pos_embed not in ("learned", "none"):
            raise ValueError(f"unknown pos_embed {pos_embed!r}; choose 'learned' or 'none'")
        self.pos_drop = nn.Dropout(drop_rate)

        dpr = [drop_path_rate * i / max(depth - 1, 1) for i in range(depth)]
        blocks = []
        for i in range(depth):
            if attn_layer is not None:  # e.g. CMHSA's convolution phase
                a = attn_layer(embed_dim, grid)
            elif i < gpsa_layers:
                a = GPSA(embed_dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop_rate,
                         proj_drop=proj_drop_rate, grid=grid, locality_strength=locality_strength,
                         gating_init=gating_init, local_init=local_init)
            else:
                cls = TalkingHeadsAttention if attn == "talking_heads" else Attention
                a = cls(embed_dim, num_heads, head_dim=head_dim, qkv_bias=qkv_bias, attn_drop=attn_drop_rate,
                        proj_drop=proj_drop_rate, rel_pos_grid=grid if attn == "relpos" else None)
            blocks.append(Block(embed_dim, a, mlp_ratio, norm=norm, drop_path=dpr[i], proj_drop=proj_drop_rate,
                                norm_layer=norm_layer, aug_paths=aug_paths, aug_mlp=aug_mlp,
                                aug_scale=aug_scale, aug_fft=aug_fft))
        self.blocks = nn.ModuleList(blocks)
        # Post-LN blocks already end in LN (Xiong et al. 2020 have no final LN): a second one would be LN o LN
        self.norm = nn.Identity() if norm == "post_ln" else norm_layer(embed_dim)
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes > 0 else nn.Identity()
        self._init_weights()
        for blk in self.blocks[:gpsa_layers]:
            blk.attn.gating_param.requires_grad_(train_gating)
            if freeze_gpsa:
                blk.attn.requires_grad_(False)

    def _init_weights(self) -> None:
        """timm's ViT/ConViT init: trunc-normal(0.02) linears and embeddings, unit LayerNorms, then
        ConViT's convolutional init of GPSA layers."""
        if self.pos_embed is not None:
            trunc_normal_(self.pos_embed, std=0.02)
        if self.cls_token is not None:
            trunc_normal_(self.cls_token, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        for m in self.modules():
            if isinstance(m, GPSA) and m.use_local_init:
                m.local_init()

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        return {"pos_embed", "cls_token"}

    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        self.num_classes = num_classes
        self.head = nn.Linear(self.embed_dim, num_classes) if num_classes > 0 else nn.Identity()

    def _add_cls(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        if self.cls_token is not None and self.cls_insert_at == 0:
            x = self._add_cls(x)
        if self.pos_embed is not None:
            x = x + self.pos_embed
        x = self.pos_drop(x)
        for i, blk in enumerate(self.blocks):
            if self.cls_token is not None and i == self.cls_insert_at and i > 0:
                x = self._add_cls(x)
            x = blk(x)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = x[:, 0] if self.global_pool == "token" else x[:, self.num_prefix_tokens:].mean(dim=1)
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))
