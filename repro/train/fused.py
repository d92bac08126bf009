"""K runs of one architecture trained together as one batched model: a cell's seeds, or a grid's learning rates.

Why: a cpu-size ViT fills a small part of a GPU; K of them stacked (torch.func's ``stack_module_state`` + ``vmap``
+ ``functional_call``) run kernels K times larger. Each run keeps its own init, data stream, AdamW moments, lr,
schedule and gradient clipping, so its steps equal the run alone up to float rounding (``tests/test_fused.py``).
``compile=True`` compiles the clipping and AdamW update (about a thousand launches a step otherwise). Shared:
drop path and dropout draw from one stream under ``vmap(randomness="different")``; at 0, as at cpu, nothing."""
from __future__ import annotations

import copy
import json
import math
from functools import lru_cache

import torch
from torch.func import functional_call, stack_module_state, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..data import choose_pipeline
from ..runs import RunSpec
from . import precision
from .recipe import build_optimizer, build_scheduler, learning_rate

# SDPA's memory-efficient kernel, under vmap on an H200 (torch 2.11), fails its backward with "LSE is not
# correctly aligned (strideH)" (benchmarks/README.md, "A GPU slot"): the fused step leaves it out
VMAP_SAFE_SDPA = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]

# Under vmap, SDPA's math path runs with autocast live inside it, and it does not first upcast q, k, v to fp32 as
# it does alone: its _safe_softmax gets a bf16 input, and CUDA's autocast gives the softmax inside it an fp32
# result. CUDA's softmax backward refuses that pair ("expected input and grad types to match, or input to be
# at::Half and grad to be at::Float": the H100 slot, benchmarks/README.md). Under autocast the fused step hands
# _safe_softmax an fp32 input, as the run alone computes it (tests/test_fused.py emulates CUDA's policy on a CPU).
@lru_cache(maxsize=None)
def softmax_from_fp32(autocast_key: str) -> torch.library.Library:
    """Registers, once per autocast key ("AutocastCUDA", "AutocastCPU"), _safe_softmax from an fp32 input."""
    lib = torch.library.Library("aten", "IMPL")
    below = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, autocast_key))

    def kernel(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        with torch._C._ExcludeDispatchKeyGuard(below):
            return torch.ops.aten._safe_softmax(x.float() if x.dtype in (torch.bfloat16, torch.float16) else x,
                                                dim, dtype)
    lib.impl("_safe_softmax", kernel, autocast_key)
    return lib  # kept alive by the cache: the registration lasts the process


def softmax_dtypes(losses: torch.Tensor) -> list[str]:
    """The softmax nodes of the graph behind ``losses``, each distinct 'name(input dtype -> result dtype)' once, read
    from the autograd graph (a dispatch-mode logger would change what autocast does inside the ops it sees)."""
    seen, todo, out = set(), [losses.grad_fn], []
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(f for f, _ in node.next_functions)
        result = getattr(node, "_saved_result", None)
        if "Softmax" in type(node).__name__ and result is not None:
            source, slot = node.next_functions[0]
            given = source._input_metadata[slot].dtype if source is not None else "untracked"
            out.append(f"{type(node).__name__}({given} -> {result.dtype})")
    return sorted(set(out))


# recipe keys that may differ between the runs of a group; every other key must be equal
PER_RUN = ("lr", "base_lr", "clip_grad")


class NotFusable(ValueError):
    """A group whose runs cannot continue together (e.g. checkpoints at different steps)."""


def fast_data(config: dict) -> dict | None:
    """The data config a fused run trains on (the fast path), or None when its batches would differ."""
    data, recipe = config["data"], config["recipe"]
    pipeline = choose_pipeline(data)
    draws_nothing = not recipe.get("aa") and not float(recipe.get("reprob") or 0) \
        and not float(recipe.get("mixup") or 0) and not float(recipe.get("cutmix") or 0)
    return {**data, "pipeline": "fastpath"} if pipeline == "fastpath" or (pipeline == "tensor" and draws_nothing) else None


def group_key(spec: RunSpec) -> str | None:
    """Runs with the same key fuse: training runs of one paper and scale equal but for the seed and ``PER_RUN``, on
    the fast path's data, with no losses, objective, probes, EMA or init source. None: this run trains alone."""
    c = spec.config
    if (spec.kind != "train" or any(c.get(k) for k in ("losses", "objective", "probes", "init"))
            or c["recipe"].get("ema") or fast_data(c) is None):
        return None
    shared = {**c, "recipe": {k: v for k, v in c["recipe"].items() if k not in PER_RUN}}
    return json.dumps([spec.paper, spec.scale, shared], sort_keys=True, default=str)


def groups(specs: list[RunSpec]) -> list[list[RunSpec]]:
    """The groups of two or more runs among ``specs``, in order of their first run."""
    by_key: dict[str, list[RunSpec]] = {}
    for s in specs:
        key = group_key(s)
        if key is not None:
            by_key.setdefault(key, []).append(s)
    return [g for g in by_key.values() if len(g) > 1]


def check_group(recipes: list[dict]) -> None:
    """A ValueError naming the first recipe key on which two runs differ where a group cannot."""
    first = {k: v for k, v in recipes[0].items() if k not in PER_RUN}
    for i, r in enumerate(recipes[1:], 1):
        other = {k: v for k, v in r.items() if k not in PER_RUN}
        if other != first:
            key = next(k for k in sorted(set(first) | set(other)) if first.get(k) != other.get(k))
            raise ValueError(f"runs 0 and {i} differ in recipe.{key} ({first.get(key)!r} vs {other.get(key)!r}): "
                             f"a fused group shares all but {', '.join(PER_RUN)}; train them alone")


def clipped_adamw(params: list, grads: list, exp_avg: list, exp_avg_sq: list, decay: list[float],
                  clip: torch.Tensor, lr: torch.Tensor, t: torch.Tensor, betas: tuple, eps: float) -> torch.Tensor:
    """torch's clip_grad_norm_ then torch.optim.AdamW's update, per run (the leading dimension), over stacked
    tensors in place; returns each run's gradient norm before clipping."""
    norm = torch.stack([g.float().flatten(1).norm(dim=1) for g in grads]).norm(dim=0)
    scale = (clip / (norm + 1e-6)).clamp(max=1.0)
    (b1, b2), k = betas, len(lr)
    step_size, root2 = lr / (1 - b1 ** t), torch.sqrt(1 - b2 ** t)
    for p, g, m, v, wd in zip(params, grads, exp_avg, exp_avg_sq, decay):
        shape = (k,) + (1,) * (p.dim() - 1)
        g = g * scale.view(shape).to(g.dtype)
        p.mul_(1 - lr.view(shape) * wd)
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        p.sub_(step_size.view(shape) * m / (v.sqrt() / root2 + eps))
    return norm


class FusedRuns:
    """The stacked parameters, per-run AdamW state and schedules of K runs; ``step`` trains all K once.
    ``schedules``: each run's own (optimizer, timm scheduler) pair, whose lr the step reads (the engine's)."""

    def __init__(self, models: list[torch.nn.Module], recipes: list[dict], epochs: int, steps_per_epoch: int,
                 criterion: torch.nn.Module, amp_dtype: torch.dtype | None = None, compile: bool = False,
                 schedules: list[tuple] | None = None):
        check_group(recipes)
        self.k, self.criterion, self.amp_dtype = len(models), criterion, amp_dtype
        params, self.buffers = stack_module_state(models)
        self.params = {n: p.detach().requires_grad_(True) for n, p in params.items()}
        self.base = copy.deepcopy(models[0]).to("meta")
        self.device = next(iter(self.params.values())).device
        optimizer = build_optimizer(models[0], recipes[0])  # timm's decay groups and AdamW settings
        names = {id(p): n for n, p in models[0].named_parameters()}
        self.decay = {names[id(p)]: g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
        self.betas, self.eps = optimizer.param_groups[0]["betas"], optimizer.param_groups[0]["eps"]
        self.moments = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in self.params.items()}
        self.clip = torch.tensor([float(r.get("clip_grad") or math.inf) for r in recipes], device=self.device)
        # per run, timm's schedule on a one-parameter optimizer: its lr is the run's lr at each step
        if schedules is None:
            holders = [torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=learning_rate(r)) for r in recipes]
            schedules = [(o, build_scheduler(o, r, epochs, steps_per_epoch)) for o, r in zip(holders, recipes)]
        self.lr_holders, self.schedulers = [o for o, _ in schedules], [s for _, s in schedules]
        self.step_count, self.grad_norm = 0, torch.zeros(self.k, device=self.device)
        self.update = torch.compile(clipped_adamw, dynamic=False) if compile else clipped_adamw
        if amp_dtype is not None:
            softmax_from_fp32("AutocastCUDA" if self.device.type == "cuda" else "AutocastCPU")

    def _loss(self, params: dict, buffers: dict, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with precision.autocast(x.device, self.amp_dtype):
            return self.criterion(functional_call(self.base, (params, buffers), (x,)), targets)

    def lrs(self) -> torch.Tensor:
        """Each run's lr now, on the device (from pinned memory on a GPU: the copy needs no host sync)."""
        lrs = torch.tensor([o.param_groups[0]["lr"] for o in self.lr_holders], pin_memory=self.device.type == "cuda")
        return lrs.to(self.device, non_blocking=True)

    def losses(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The K runs' losses on their own batches (x: K x B x ...), with their autograd graph: the step's forward."""
        self.base.train()
        with sdpa_kernel(VMAP_SAFE_SDPA):
            return vmap(self._loss, randomness="different")(self.params, self.buffers, x, targets)

    def step(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """One optimizer step of every run on its own batch (x: K x B x ...); the K losses, on the device."""
        losses = self.losses(x, targets)  # runs are independent: run k's gradient is its own loss's
        grads = torch.autograd.grad(losses.sum(), list(self.params.values()))
        names = list(self.params)
        t = torch.full((), float(self.step_count + 1), device=self.device)  # a fill kernel: no host sync
        with torch.no_grad():
            self.grad_norm = self.update(
                [self.params[n] for n in names], list(grads), [self.moments[n][0] for n in names],
                [self.moments[n][1] for n in names], [self.decay[n] for n in names], self.clip, self.lrs(), t,
                self.betas, self.eps)
        self.step_count += 1
        for s in self.schedulers:
            s.step_update(num_updates=self.step_count)
        return losses.detach().float()

    def load_moments(self, k: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Run k's AdamW moments from its own optimizer (restored from its checkpoint; fresh: none)."""
        for name, p in model.named_parameters():
            if p in optimizer.state:
                self.moments[name][0][k] = optimizer.state[p]["exp_avg"]
                self.moments[name][1][k] = optimizer.state[p]["exp_avg_sq"]

    def store(self, k: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Run k's weights and AdamW state into its own model and optimizer, as torch's AdamW keeps them."""
        model.load_state_dict(self.model_state(k))
        for name, p in model.named_parameters():
            optimizer.state[p] = {"step": torch.tensor(float(self.step_count)),
                                  "exp_avg": self.moments[name][0][k].clone(),
                                  "exp_avg_sq": self.moments[name][1][k].clone()}

    def model_state(self, k: int) -> dict:
        """Run k's weights as its own model's state_dict."""
        return {**{n: p[k].detach().clone() for n, p in self.params.items()},
                **{n: b[k].clone() for n, b in self.buffers.items()}}
