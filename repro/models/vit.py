"""One Vision Transformer for all five papers; variants are constructor arguments (timm style).

- ``attn``: 'mhsa' (SDPA) | 'relpos' (learned relative position bias, CMHSA) | 'talking_heads';
  ``gpsa_layers`` = n makes the first n blocks GPSA (ConViT: 10 of 12).
- ``norm``: 'pre_ln' | 'post_ln' | 'res_post_ln' (see blocks.py); ``aug_paths``: Aug-ViT shortcuts.
- ``global_pool``: 'token' (class token) | 'avg' (GAP over patch tokens, CMHSA) | 'max' | 'avgmax' | ''
  (no pooling: every token reaches the head), as timm's VisionTransformer.
- ``class_token``: None gives one unless the model pools patch tokens ('avg', 'max', 'avgmax'), so that
  global_pool='avg' builds CMHSA's GAP model; True gives timm's layout of a class token beside GAP.
- ``patch_embed``: 'conv' (timm PatchEmbed) | 'identity' (raw flattened patches, CMHSA).
- ``attn_layer``: a factory (dim, grid) -> module replacing attention in every block (CMHSA conv phase).
- ``pos_embed``: 'learned' | 'none'. With GPSA layers the class token joins after the last GPSA block
  and the absolute position embedding covers patches only (as ConViT); otherwise it covers the class
  token too (as DeiT).
- ``dynamic_img_size``: any image size divisible by the patch, the position embedding resampled to its
  grid (timm's option); only where the attention does not depend on the grid (MHSA, talking heads).

The timm model API (``forward_intermediates``, ``feature_info``, ``set_grad_checkpointing``, ``group_matcher``,
``reset_classifier``, ``head_hidden_size``) follows timm's VisionTransformer, so timm's tools work unchanged.
"""
from __future__ import annotations

from functools import partial
from typing import Callable

import torch
from timm.layers import PatchEmbed, get_device_dtype, resample_abs_pos_embed, trunc_normal_
from timm.models import checkpoint
from timm.models._features import feature_take_indices
from timm.models.vision_transformer import global_pool_nlc
from torch import nn

from .attention import Attention, TalkingHeadsAttention
from .blocks import Block
from .gpsa import GPSA
from .patches import IdentityPatchEmbed

ATTENTIONS = ("mhsa", "relpos", "talking_heads")
POOLS = ("token", "avg", "max", "avgmax", "")


class VisionTransformer(nn.Module):
    def __init__(self, img_size: int | tuple[int, int] = 224, patch_size: int = 16, in_chans: int = 3,
                 num_classes: int = 1000, embed_dim: int = 768, depth: int = 12, num_heads: int = 12,
                 head_dim: int | None = None, mlp_ratio: float = 4.0, qkv_bias: bool = True, attn: str = "mhsa",
                 gpsa_layers: int = 0, locality_strength: float = 1.0, local_init: bool = True,
                 gating_init: float = 1.0, train_gating: bool = True, freeze_gpsa: bool = False, norm: str = "pre_ln",
                 aug_paths: int = 0, aug_mlp: bool = True, aug_scale: float = 1.0, aug_fft: bool = True,
                 global_pool: str = "token", class_token: bool | None = None, patch_embed: str = "conv",
                 pos_embed: str = "learned", drop_rate: float = 0.0, attn_drop_rate: float = 0.0,
                 proj_drop_rate: float = 0.0, drop_path_rate: float = 0.0, norm_eps: float = 1e-6,
                 attn_layer: Callable[[int, tuple[int, int]], nn.Module] | None = None,
                 dynamic_img_size: bool = False):
        super().__init__()
        class_token = _check_config(attn, global_pool, class_token, gpsa_layers, depth, dynamic_img_size,
                                    attn_layer is not None, patch_embed)
        self.num_classes = num_classes
        self.global_pool = global_pool
        self.embed_dim = self.num_features = self.head_hidden_size = embed_dim
        self.patch_size = patch_size
        self.dynamic_img_size = dynamic_img_size
        self.grad_checkpointing = False
        norm_layer = partial(nn.LayerNorm, eps=norm_eps)

        self.patch_embed = _patch_embed(patch_embed, img_size, patch_size, in_chans, embed_dim, dynamic_img_size)
        grid = tuple(self.patch_embed.grid_size)
        num_patches = grid[0] * grid[1]
        self.grid_size = grid

        self.num_prefix_tokens = 1 if class_token else 0
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if class_token else None
        # ConViT inserts the class token after its GPSA blocks; DeiT before the first block.
        self.cls_insert_at = gpsa_layers if (self.cls_token is not None and gpsa_layers) else 0
        pos_tokens = num_patches + (self.num_prefix_tokens if self.cls_insert_at == 0 else 0)
        self.pos_embed = nn.Parameter(torch.zeros(1, pos_tokens, embed_dim)) if pos_embed == "learned" else None
        if pos_embed not in ("learned", "none"):
            raise ValueError(f"unknown pos_embed {pos_embed!r}; choose 'learned' or 'none'")
        self.pos_drop = nn.Dropout(drop_rate)

        dpr = [drop_path_rate * i / max(depth - 1, 1) for i in range(depth)]
        gpsa = partial(GPSA, embed_dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop_rate,
                       proj_drop=proj_drop_rate, grid=grid, locality_strength=locality_strength,
                       gating_init=gating_init, local_init=local_init)
        mhsa = partial(TalkingHeadsAttention if attn == "talking_heads" else Attention, embed_dim, num_heads,
                       head_dim=head_dim, qkv_bias=qkv_bias, attn_drop=attn_drop_rate, proj_drop=proj_drop_rate,
                       rel_pos_grid=grid if attn == "relpos" else None)
        block = partial(Block, embed_dim, mlp_ratio=mlp_ratio, norm=norm, proj_drop=proj_drop_rate,
                        norm_layer=norm_layer, aug_paths=aug_paths, aug_mlp=aug_mlp, aug_scale=aug_scale,
                        aug_fft=aug_fft)
        # each block's attention is built just before the block, as timm does; attn_layer: CMHSA's conv phase
        self.blocks = nn.ModuleList([
            block(attn_layer(embed_dim, grid) if attn_layer is not None else gpsa() if i < gpsa_layers else mhsa(),
                  drop_path=dpr[i]) for i in range(depth)])
        self.feature_info = [dict(module=f"blocks.{i}", num_chs=embed_dim, reduction=patch_size) for i in range(depth)]
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
        """Parameters timm's optimizer factory keeps out of weight decay: the embeddings this model has and
        CMHSA's relative-position tables (as timm's Swin and BEiT keep theirs)."""
        embeddings = {name for name in ("pos_embed", "cls_token") if getattr(self, name) is not None}
        return embeddings | {name for name, _ in self.named_parameters() if name.endswith(".rel_pos.table")}

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict:
        """Parameter groups for timm's layer-wise lr decay: the embeddings, each block, the final norm."""
        return dict(stem=r"^cls_token|pos_embed|patch_embed", blocks=[(r"^blocks\.(\d+)", None), (r"^norm", (99999,))])

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block's activations in the backward pass instead of storing them."""
        self.grad_checkpointing = enable

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """A new head for ``num_classes`` (0: none) and, if given, a new pooling ('' keeps every token)."""
        if global_pool is not None:
            if global_pool not in POOLS:
                raise ValueError(f"unknown global_pool {global_pool!r}; choose one of {POOLS}")
            if global_pool == "token" and self.cls_token is None:
                raise ValueError("global_pool='token' reads the class token and this model has none; "
                                 "choose 'avg' or ''")
            self.global_pool = global_pool
        self.num_classes = num_classes
        self.head = (nn.Linear(self.embed_dim, num_classes, **get_device_dtype(self)) if num_classes > 0
                     else nn.Identity())
        self.head.train(self.training)

    def _add_cls(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        """Patch tokens (with DeiT's class token) plus the absolute position embedding."""
        x = self.patch_embed(x)
        pos_embed = self.pos_embed
        if self.dynamic_img_size:  # (B, H, W, C): resample the embedding to this image's grid
            b, h, w, c = x.shape
            if pos_embed is not None:
                prefix = self.num_prefix_tokens if self.cls_insert_at == 0 else 0
                pos_embed = resample_abs_pos_embed(pos_embed, new_size=(h, w), old_size=self.grid_size,
                                                   num_prefix_tokens=prefix)
            x = x.reshape(b, h * w, c)
        if self.cls_token is not None and self.cls_insert_at == 0:
            x = self._add_cls(x)
        if pos_embed is not None:
            x = x + pos_embed
        return self.pos_drop(x)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self._embed(x)
        for i, blk in enumerate(self.blocks):
            if self.cls_token is not None and i == self.cls_insert_at and i > 0:
                x = self._add_cls(x)
            if self.grad_checkpointing and not torch.jit.is_scripting():
                x = checkpoint(blk, x)
            else:
                x = blk(x)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = global_pool_nlc(x, pool_type=self.global_pool, num_prefix_tokens=self.num_prefix_tokens)
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def _prefix_after(self, i: int) -> int:
        """How many prefix tokens lead the sequence that block i outputs (ConViT's class token joins late)."""
        return self.num_prefix_tokens if self.cls_token is not None and i >= self.cls_insert_at else 0

    def forward_intermediates(self, x: torch.Tensor, indices: int | list[int] | None = None,
                              return_prefix_tokens: bool = False, norm: bool = False, stop_early: bool = False,
                              output_fmt: str = "NCHW", intermediates_only: bool = False):
        """timm's feature API: the outputs of the blocks in ``indices`` (last n if an int, all if None),
        patch tokens only, as (B, C, H, W) or (B, N, C); with the final features unless ``intermediates_only``."""
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt={output_fmt!r}: choose 'NCHW' or 'NLC'")
        take, last = feature_take_indices(len(self.blocks), indices)
        b, _, height, width = x.shape
        grid = (height // self.patch_size, width // self.patch_size)
        x = self._embed(x)
        intermediates, prefixes = [], []
        for i, blk in enumerate(self.blocks[:last + 1] if stop_early else self.blocks):
            if self.cls_token is not None and i == self.cls_insert_at and i > 0:
                x = self._add_cls(x)
            x = checkpoint(blk, x) if self.grad_checkpointing else blk(x)
            if i in take:
                y = self.norm(x) if norm else x
                n = self._prefix_after(i)
                prefixes.append(y[:, :n])
                intermediates.append(y[:, n:])
        if output_fmt == "NCHW":
            intermediates = [y.reshape(b, grid[0], grid[1], -1).permute(0, 3, 1, 2).contiguous() for y in intermediates]
        if return_prefix_tokens:
            intermediates = list(zip(intermediates, prefixes))
        if intermediates_only:
            return intermediates
        return self.norm(x), intermediates

    def prune_intermediate_layers(self, indices: int | list[int] = 1, prune_norm: bool = False,
                                  prune_head: bool = True) -> list[int]:
        """Drop the blocks after the last of ``indices`` (and the norm / head if asked): timm's features_only."""
        take, last = feature_take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[:last + 1]
        if self.cls_token is not None and last < self.cls_insert_at:
            # ConViT's class token would join after the kept blocks: it goes, and so does a head reading it
            self.cls_token = None
            self.num_prefix_tokens = 0
            prune_head = prune_head or self.global_pool == "token"
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0, "")
        return take


def _check_config(attn: str, global_pool: str, class_token: bool | None, gpsa_layers: int, depth: int,
                  dynamic_img_size: bool, has_attn_layer: bool, patch_embed: str) -> bool:
    """Reject argument combinations that would build a model that silently is not what was asked for;
    returns whether the model has a class token."""
    if attn not in ATTENTIONS:
        raise ValueError(f"unknown attention {attn!r}; choose one of {ATTENTIONS} (GPSA via gpsa_layers)")
    if global_pool not in POOLS:
        raise ValueError(f"unknown global_pool {global_pool!r}; choose one of {POOLS}")
    class_token = global_pool in ("token", "") if class_token is None else class_token
    if global_pool == "token" and not class_token:
        raise ValueError("global_pool='token' reads the class token: drop class_token=False or pool with 'avg'")
    if not 0 <= gpsa_layers <= depth:
        raise ValueError(f"gpsa_layers={gpsa_layers} must lie in [0, depth={depth}]; pass gpsa_layers with depth")
    if gpsa_layers == depth and class_token:
        raise ValueError(f"all {depth} blocks are GPSA, so a class token joining after them would never see a "
                         f"patch; keep at least one MHSA block or use global_pool='avg'")
    if dynamic_img_size and (gpsa_layers or attn == "relpos" or has_attn_layer or patch_embed != "conv"):
        raise ValueError("dynamic_img_size=True needs attention that works on any patch grid, but GPSA, relpos "
                         "and the CMHSA conv phase are built for one: build the model at the img_size you feed it")
    return class_token


def _patch_embed(kind: str, img_size, patch_size: int, in_chans: int, embed_dim: int, dynamic: bool) -> nn.Module:
    """timm's convolutional PatchEmbed, or CMHSA's raw flattened patches."""
    if kind == "conv":
        # timm's dynamic layout: (B, H, W, C) patches, flattened after the embedding is resampled to H x W
        return PatchEmbed(img_size, patch_size, in_chans, embed_dim,
                          **(dict(strict_img_size=False, output_fmt="NHWC") if dynamic else {}))
    if kind != "identity":
        raise ValueError(f"unknown patch_embed {kind!r}; choose 'conv' or 'identity'")
    embed = IdentityPatchEmbed(img_size, patch_size, in_chans)
    if embed.embed_dim != embed_dim:
        raise ValueError(f"identity patch embedding gives {embed.embed_dim} dims "
                         f"(patch {patch_size}^2 x {in_chans} channels), not embed_dim={embed_dim}")
    return embed
