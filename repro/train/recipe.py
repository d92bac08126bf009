"""The DeiT training recipe (Touvron et al. 2021, as used unchanged by ConViT) built from timm parts.

Every value comes from the run's ``recipe`` config (repro/conf/recipe/deit.yaml), so any paper or command line
can change one: AdamW, lr = base_lr x batch / 512, cosine schedule with warm-up, Mixup/CutMix with label
smoothing in the soft targets, optional EMA. Augmentation and repeated augmentation live in repro/data."""
from __future__ import annotations

import torch
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from timm.utils import ModelEmaV3


def learning_rate(recipe: dict) -> float:
    """``recipe.lr`` if given, else DeiT's linear rule base_lr x (global batch / lr_base_batch)."""
    if recipe.get("lr") is not None:
        return float(recipe["lr"])
    return float(recipe["base_lr"]) * int(recipe["batch_size"]) / float(recipe.get("lr_base_batch", 512))


def run_epochs(recipe: dict, data: dict) -> int:
    """Epochs to train. ConViT Table 2: on a fraction f of the data, epochs x 1/f (same images seen)."""
    epochs = int(recipe["epochs"])
    fraction = float(data.get("fraction", 1.0))
    if recipe.get("scale_epochs_with_fraction", True) and fraction < 1:
        epochs = int(round(epochs / fraction))
    return max(1, epochs)


def build_optimizer(model: torch.nn.Module, recipe: dict, extra: torch.nn.Module | None = None,
                    fused: bool = False) -> torch.optim.Optimizer:
    """timm's optimizer over the model and ``extra`` (an objective's own parameters, with timm's no-decay rule for
    ndim <= 1); ``fused``: Adam/AdamW as torch's fused kernel (the same update, one launch group)."""
    kwargs = {"eps": recipe.get("opt_eps")} if recipe.get("opt_eps") is not None else {}
    if fused and recipe.get("opt", "adamw") in ("adam", "adamw"):
        kwargs["fused"] = True
    if recipe.get("opt_betas"):
        kwargs["betas"] = tuple(recipe["opt_betas"])
    weight_decay = float(recipe.get("weight_decay", 0.05))
    opt = create_optimizer_v2(model, opt=recipe.get("opt", "adamw"), lr=learning_rate(recipe),
                              weight_decay=weight_decay, momentum=float(recipe.get("momentum", 0.9)), **kwargs)
    if extra is not None:
        own = {id(p) for p in model.parameters()}
        params = [p for p in extra.parameters() if p.requires_grad and id(p) not in own]
        decay, no_decay = [p for p in params if p.ndim > 1], [p for p in params if p.ndim <= 1]
        for group, wd in ((decay, weight_decay), (no_decay, 0.0)):
            if group:
                opt.add_param_group({"params": group, "weight_decay": wd})
    return opt


def build_scheduler(optimizer, recipe: dict, epochs: int, steps_per_epoch: int):
    """timm scheduler; ``recipe.step_on_epochs`` true steps once per epoch as DeiT (whole warm-up epochs), false per
    update (a warm-up of a fraction of an epoch, rounded to whole updates)."""
    per_update = not recipe.get("step_on_epochs", True)
    warmup = float(recipe.get("warmup_epochs", 0) or 0)
    warmup = round(warmup * steps_per_epoch) / steps_per_epoch if per_update and steps_per_epoch else int(warmup)
    scheduler, _ = create_scheduler_v2(
        optimizer, sched=recipe.get("sched", "cosine"), num_epochs=epochs,
        warmup_epochs=warmup, warmup_lr=float(recipe.get("warmup_lr", 1e-6)),
        min_lr=float(recipe.get("min_lr", 0.0)), cooldown_epochs=int(recipe.get("cooldown_epochs", 0)),
        decay_rate=float(recipe.get("decay_rate", 0.1)),
        step_on_epochs=bool(recipe.get("step_on_epochs", True)), updates_per_epoch=steps_per_epoch)
    return scheduler


def build_mixup(recipe: dict, num_classes: int) -> Mixup | None:
    """timm Mixup/CutMix (soft targets with label smoothing) or None when both alphas are 0."""
    if float(recipe.get("mixup", 0)) <= 0 and float(recipe.get("cutmix", 0)) <= 0:
        return None
    return Mixup(mixup_alpha=float(recipe.get("mixup", 0)), cutmix_alpha=float(recipe.get("cutmix", 0)),
                 prob=float(recipe.get("mixup_prob", 1.0)), switch_prob=float(recipe.get("mixup_switch_prob", 0.5)),
                 mode=recipe.get("mixup_mode", "batch"), label_smoothing=float(recipe.get("smoothing", 0.0)),
                 num_classes=num_classes)


def build_criterion(recipe: dict, mixup: Mixup | None) -> torch.nn.Module:
    if mixup is not None:
        return SoftTargetCrossEntropy()
    # torch's CE with label smoothing equals timm's LabelSmoothingCrossEntropy on class indices and also
    # takes soft targets, which an objective may make from them (the oversmoothing paper's patch mixing)
    return torch.nn.CrossEntropyLoss(label_smoothing=float(recipe.get("smoothing", 0) or 0))


def build_ema(model: torch.nn.Module, recipe: dict) -> ModelEmaV3 | None:
    if not recipe.get("ema"):
        return None
    return ModelEmaV3(model, decay=float(recipe.get("ema_decay", 0.99996)))
