"""Fine-tuning at a new resolution: start a model from another run's model trained at another size.

Everything but the learned position embedding carries over unchanged; the embedding is resampled to
the new patch grid by timm's ``resample_abs_pos_embed`` (bicubic over the grid, prefix tokens kept),
as DeiT's fine-tuning at 384 px does. Used as an engine ``config["init"]`` function (the same hook
that two-phase training uses): ``{"from": source.as_source(), "fn": "models.at_new_resolution"}``.
"""
from __future__ import annotations

import torch
from timm.layers import resample_abs_pos_embed
from torch import nn
from ..functions import register


@register("models.at_new_resolution")
def at_new_resolution(source: nn.Module, model: nn.Module) -> nn.Module:
    """Write ``source``'s weights into ``model`` (same architecture, another image size), the position
    embedding resampled from the source's patch grid to the model's."""
    state = dict(source.state_dict())
    target = model.state_dict()
    if getattr(source, "pos_embed", None) is not None and state["pos_embed"].shape != target["pos_embed"].shape:
        prefix = source.pos_embed.shape[1] - source.grid_size[0] * source.grid_size[1]
        state["pos_embed"] = resample_abs_pos_embed(state["pos_embed"], new_size=list(model.grid_size),
                                                    old_size=list(source.grid_size), num_prefix_tokens=prefix)
    wrong = [k for k in target if k in state and state[k].shape != target[k].shape]
    if wrong or set(state) != set(target):
        raise ValueError(f"at_new_resolution: the models differ beyond the position embedding "
                         f"(shapes {wrong[:3]}, names {sorted(set(state) ^ set(target))[:3]}); "
                         "fine-tune the same architecture at another img_size")
    with torch.no_grad():
        model.load_state_dict(state)
    return model
