"""A fused group's steps equal its runs trained alone (repro/train/fused.py)."""
from __future__ import annotations

import pytest
import timm
import torch

from repro.data.fastpath import fast_loader
from repro.data.tensor_loader import TensorTrainLoader
from repro.train import precision
from repro.train.machine import trained_how
from repro.train.fused import FusedRuns, check_group, softmax_dtypes
from repro.train.recipe import build_criterion, build_optimizer, build_scheduler

MODEL = dict(img_size=32, patch_size=8, depth=1, embed_dim=32, num_heads=2, num_classes=10)
DATA = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "img_size": 32, "crop_padding": 4}
RECIPE = {"batch_size": 8, "lr": 1e-3, "weight_decay": 0.05, "sched": "cosine", "warmup_epochs": 1,
          "warmup_lr": 1e-4, "min_lr": 1e-5, "step_on_epochs": False, "aa": "rand-m9", "hflip": 0.5,
          "reprob": 0.25, "mixup": 0.8, "cutmix": 1.0, "smoothing": 0.1}
SEEDS, STEPS, EPOCHS = (0, 1, 2), 4, 2
# run 1 at another lr; run 2 clipped at a norm its gradients exceed, the others at one they never reach
PER_RUN = [{"clip_grad": 100.0}, {"lr": 3e-3, "clip_grad": 100.0}, {"clip_grad": 0.05}]
BF16_RTOL = 1e-2  # bf16: each step's loss, fused vs alone (test_fused_bf16_tracks_the_runs_trained_alone)
RTOL = 1e-5  # float32: each parameter tensor after STEPS steps, ||fused - alone|| / ||alone|| (measured: <= 6e-7)


def key_bias_out(name: str, w: torch.Tensor) -> torch.Tensor:
    """The attention's key bias left out: its gradient is zero in exact arithmetic (softmax ignores a
    shift shared by a query's scores), so AdamW turns float rounding into +-lr steps there, alone or fused."""
    if not name.endswith("attn.qkv.bias"):
        return w
    q, _, v = w.chunk(3)
    return torch.cat([q, v])


def model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return timm.create_model("vit_tiny_patch16_224", **MODEL)


def loader(seed: int) -> TensorTrainLoader:
    g = torch.Generator().manual_seed(123)  # one dataset, every run its own order and augmentation
    images = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (64,), generator=g)
    return fast_loader(images, labels, 8, RECIPE, DATA, 10, seed)


def alone(seed: int, recipe: dict, amp_dtype: torch.dtype | None = None) -> tuple[dict, list[float], list[float]]:
    """The engine's step (repro/train/engine.py _step) for one run: weights, losses and grad norms."""
    m, data = model(seed), loader(seed)
    opt = build_optimizer(m, recipe)
    sched = build_scheduler(opt, recipe, EPOCHS, data.steps_per_epoch)
    criterion = build_criterion(recipe, mixup=True)
    losses, norms = [], []
    for step, (x, t) in enumerate(data.epoch(0), 1):
        with precision.autocast(x.device, amp_dtype):
            loss = criterion(m(x), t)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(m.parameters(), recipe["clip_grad"])))
        opt.step()
        sched.step_update(num_updates=step)
        losses.append(float(loss.detach()))
        if step == STEPS:
            return m.state_dict(), losses, norms


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_fused_steps_equal_the_runs_trained_alone(compiled):
    """Also with the clipping and AdamW update compiled (one graph for every step: the step number is a tensor)."""
    recipes = [{**RECIPE, **r} for r in PER_RUN]
    loaders = [loader(s) for s in SEEDS]
    fused = FusedRuns([model(s) for s in SEEDS], recipes, EPOCHS, loaders[0].steps_per_epoch,
                      build_criterion(RECIPE, mixup=True), compile=compiled)
    losses, norms = [], []
    with torch._dynamo.config.patch(error_on_recompile=True):  # compiled: one graph for all the steps
        for step, batches in enumerate(zip(*(ld.epoch(0) for ld in loaders)), 1):
            losses.append(fused.step(torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])))
            norms.append(fused.grad_norm.clone())
            if step == STEPS:
                break
    for k, (seed, recipe) in enumerate(zip(SEEDS, recipes)):
        weights, ref_losses, ref_norms = alone(seed, recipe)
        assert torch.allclose(torch.stack(losses)[:, k], torch.tensor(ref_losses), rtol=RTOL)
        assert torch.allclose(torch.stack(norms)[:, k], torch.tensor(ref_norms), rtol=RTOL)
        mine = {n: key_bias_out(n, w) for n, w in fused.model_state(k).items()}
        for name, w in weights.items():
            w = key_bias_out(name, w)
            assert (mine[name] - w).norm() <= RTOL * w.norm(), (k, name)
    clipped = [n > r["clip_grad"] for n, r in zip(torch.stack(norms).T, recipes)]
    assert [bool(c.all()) for c in clipped] == [False, False, True]  # clipping bound for run 2 alone
    assert not torch.equal(fused.params["head.weight"][0], fused.params["head.weight"][1])


def fused_losses(amp_dtype: torch.dtype | None) -> torch.Tensor:
    """STEPS x K losses of the group trained fused."""
    loaders = [loader(s) for s in SEEDS]
    fused = FusedRuns([model(s) for s in SEEDS], [{**RECIPE, **r} for r in PER_RUN], EPOCHS,
                      loaders[0].steps_per_epoch, build_criterion(RECIPE, mixup=True), amp_dtype=amp_dtype)
    losses = []
    for batches in zip(*(ld.epoch(0) for ld in loaders)):
        losses.append(fused.step(torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])))
        if len(losses) == STEPS:
            return torch.stack(losses)


def test_fused_bf16_tracks_the_runs_trained_alone():
    """On a CPU in bf16 (runtime.fused with cpu_precision: bf16) the fused step is not the alone step bit for
    bit: under vmap the Linear's bias add promotes to fp32 (pytorch/pytorch#192617), so the loss's log-softmax
    runs in fp32 where alone it runs in bf16. Each run's losses stay within BF16_RTOL of its own alone
    (measured: <= 0.22 % over 4 steps)."""
    losses = fused_losses(torch.bfloat16)
    for k, (seed, r) in enumerate(zip(SEEDS, PER_RUN)):
        _, ref, _ = alone(seed, {**RECIPE, **r}, torch.bfloat16)
        assert torch.allclose(losses[:, k], torch.tensor(ref), rtol=BF16_RTOL)


def test_a_group_shares_all_but_lr_and_clipping():
    check_group([RECIPE, {**RECIPE, "lr": 5e-3, "clip_grad": 1.0}])
    try:
        check_group([RECIPE, {**RECIPE, "weight_decay": 0.1}])
    except ValueError as e:
        assert "recipe.weight_decay" in str(e)
    else:
        raise AssertionError("a group with different weight decay was accepted")


def test_a_record_says_how_its_run_was_trained():
    assert trained_how("a") == {"trained": "alone"} == trained_how("a", ["a"])
    assert trained_how("b", ["c", "a", "b"]) == {"trained": "fused", "fused_with": ["a", "c"]}


@pytest.fixture
def cuda_softmax_policy():
    """CUDA's autocast policy for softmax and log-softmax (an fp32 result when no dtype is asked:
    ``AT_FORALL_FP32_SET_OPT_DTYPE`` in ATen's autocast_mode.h) on the CPU's autocast key, which leaves them
    alone: what a bf16 step meets on a GPU, on this CPU."""
    lib = torch.library.Library("aten", "IMPL")
    cpu = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

    def fp32_result(op):
        def kernel(x, dim, dtype=None):
            with torch._C._ExcludeDispatchKeyGuard(cpu):
                return op(x, dim, torch.float32 if dtype is None and x.is_floating_point() else dtype)
        return kernel
    for name in ("softmax.int", "log_softmax.int"):
        lib.impl(name, fp32_result(getattr(torch.ops.aten, name.split(".")[0]).int), "AutocastCPU")
    yield
    lib._destroy()


def test_fused_bf16_softmax_backward_gets_matching_dtypes_under_cuda_autocast(cuda_softmax_policy):
    """The H100 failure, on a CPU: under vmap SDPA's math path gave _safe_softmax a bf16 input whose result
    CUDA's policy makes fp32, and CUDA's softmax backward refuses that pair. Every softmax of the fused step
    now has its result's dtype as input, as the run alone has (alone listed for comparison)."""
    loaders = [loader(s) for s in SEEDS[:2]]
    fused = FusedRuns([model(s) for s in SEEDS[:2]], [RECIPE, RECIPE], EPOCHS, loaders[0].steps_per_epoch,
                      build_criterion(RECIPE, mixup=True), amp_dtype=torch.bfloat16)
    batches = next(zip(*(ld.epoch(0) for ld in loaders)))
    x, t = torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])
    fused_dtypes = softmax_dtypes(fused.losses(x, t))
    with precision.autocast(x.device, torch.bfloat16):
        alone_dtypes = softmax_dtypes(build_criterion(RECIPE, mixup=True)(model(0)(x[0]), t[0]))
    assert fused_dtypes == alone_dtypes == ["LogSoftmaxBackward0(torch.float32 -> torch.float32)",
                                            "SafeSoftmaxBackward0(torch.float32 -> torch.float32)"]
