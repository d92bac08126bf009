"""One training run, top to bottom: setup, loop, evaluate, checkpoint, result.

Resumes from the run's last checkpoint (end of the last completed epoch, or the step where SIGTERM
stopped it: preempt.py) and replays the rest exactly: data order and batch augmentation are seeded
by (seed, epoch, rank), the batches of an epoch already trained are drawn again and skipped, and the
global RNG states (dropout, drop path, Mixup, RandAugment, erasing) are restored from the checkpoint.
A non-finite loss stops the run; the result says ``diverged`` and at which step.
A fresh run with ``config["init"]`` starts from another run's final model (init_from.py).
"""
from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as torch_dist
from torch.nn.parallel import DistributedDataParallel
from timm.utils import random_seed
from tqdm import tqdm

from ..data import build_data
from ..records import _jsonable
from ..runs import ConfigError, RunSpec, cache_root, run_dir, source_spec
from . import checkpoint, preempt
from .ddp import Dist, all_reduce, any_rank, barrier
from .hooks import ObjectiveStep, ProbeContext, build_losses, build_objective, probe_list, run_probes
from .init_from import init_from_source, switch_metrics
from .logs import TensorBoard, summary_line, write_csv
from .model import create_model
from .recipe import (build_criterion, build_ema, build_mixup, build_optimizer, build_scheduler,
                     run_epochs)


@dataclass
class Runtime:
    """How runs execute (not what they measure): not part of the run id."""
    dist: Dist = field(default_factory=Dist)
    amp: str = "bf16"            # bf16 | fp16 | none; autocast on CUDA only
    compile: bool = False
    deterministic: bool = False
    num_workers: int = 0
    progress: bool = True
    tensorboard: bool = False
    check_every: int = 1         # steps between non-finite checks (each is a host sync on GPU)
    persist: bool = True         # checkpoint, CSV log, TensorBoard; false for dry runs
    checkpoint_every_s: float = 0.0  # save at an epoch end once this long since the last save (0: every epoch)
    probe_batch: int = 64


@dataclass
class Result:
    status: str                  # finished | diverged
    metrics: dict
    provenance: dict             # wall_s, images_per_s, bf16, data, ...


def set_determinism(rt: Runtime) -> None:
    torch.use_deterministic_algorithms(rt.deterministic, warn_only=True)
    torch.backends.cudnn.benchmark = not rt.deterministic
    if rt.dist.device.type == "cuda" and not rt.deterministic:
        torch.set_float32_matmul_precision("high")


@torch.no_grad()
def evaluate(model, test, d: Dist, amp_dtype, prefix: str = "") -> dict:
    """Top-1 / top-5 accuracy (%) and mean cross-entropy over the whole test set (all ranks)."""
    was_training = model.training
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=d.device)  # correct1, correct5, loss, count
    for x, y in test.batches():
        with torch.autocast(d.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = model(x)
        logits = logits.float()
        top = logits.topk(min(5, logits.shape[1]), dim=1).indices
        hit = top == y[:, None]
        sums += torch.stack([hit[:, 0].sum(), hit.any(1).sum(),
                             torch.nn.functional.cross_entropy(logits, y, reduction="sum"),
                             torch.tensor(len(y), device=d.device)]).double()
    all_reduce(sums, d)
    model.train(was_training)
    c1, c5, loss, n = sums.tolist()
    return {f"{prefix}top1": 100 * c1 / n, f"{prefix}top5": 100 * c5 / n, f"{prefix}eval_loss": loss / n}


def _gather_rng(d: Dist) -> list:
    state = checkpoint.rng_state()
    if d.world_size == 1:
        return [state]
    states = [None] * d.world_size
    torch_dist.all_gather_object(states, state)
    return states


def _first_nonfinite(window: list, step: int, d: Dist) -> int | None:
    """Step number of the first non-finite loss among the last len(window) steps (any rank), or None."""
    finite = torch.isfinite(torch.stack(window))
    if all_reduce((~finite).any().float(), d, torch_dist.ReduceOp.MAX).item() == 0:
        return None
    bad = (~finite).nonzero()
    return step - len(window) + 1 + (int(bad[0]) if len(bad) else 0)


def _stop(step: int, stop_at: int | None, d: Dist) -> bool:
    """Stop here (all ranks agree): SIGTERM arrived, or ``stop_at`` steps are done (checks and tests)."""
    return any_rank(preempt.requested() or (stop_at is not None and step >= stop_at), d)


def train(spec: RunSpec, rt: Runtime, stop_at: int | None = None) -> Result:
    """Train (or resume) one run and evaluate it; rank 0 keeps checkpoint and logs.

    On SIGTERM (or after ``stop_at`` optimizer steps) it checkpoints where it is and raises
    preempt.Preempted; run again, it resumes there."""
    wall0 = time.perf_counter()
    cfg, recipe, d = spec.config, spec.config["recipe"], rt.dist
    out_dir = run_dir(spec)
    if rt.persist and d.is_main:  # also when a probe retrains a source whose run dir is gone (fresh clone)
        out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = out_dir / "last.pt"
    set_determinism(rt)

    # ---- setup
    random_seed(spec.seed)
    state = checkpoint.load(ckpt_path, spec.fingerprint) if rt.persist else None
    data = build_data(cfg["data"], recipe, seed=spec.seed, rank=d.rank, world=d.world_size,
                      device=d.device, num_workers=rt.num_workers)
    model = create_model(cfg, data.num_classes).to(d.device)
    source, switch = source_spec(spec), {}
    if source is not None and state is None:  # a resumed run's checkpoint already holds trained weights
        src_model = init_from_source(model, spec, data.num_classes, d.device, trained=rt.persist)
        if source.config["data"].get("img_size") == cfg["data"].get("img_size"):  # else a fine-tune elsewhere
            switch = switch_metrics(src_model, model, data.test, d)
        del src_model
    losses = build_losses(cfg.get("losses"), model)
    probes = probe_list(cfg.get("probes"))
    mixup = build_mixup(recipe, data.num_classes)
    criterion = build_criterion(recipe, mixup)
    objective = build_objective(cfg.get("objective"), model, criterion, data.num_classes)
    if objective is not None:
        if losses:
            raise ConfigError("config sets both 'objective' and 'losses': extra loss terms read the engine's "
                              "own logits, which an objective replaces; compute them inside the objective")
        objective.to(d.device)
    ema = build_ema(model, recipe)
    optimizer = build_optimizer(model, recipe, extra=objective)
    epochs, steps_per_epoch = run_epochs(recipe, cfg["data"]), data.train.steps_per_epoch
    max_steps = int(recipe.get("max_steps") or 0)
    total_steps = min(epochs * steps_per_epoch, max_steps or epochs * steps_per_epoch)
    scheduler = build_scheduler(optimizer, recipe, epochs, steps_per_epoch)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(rt.amp) if d.device.type == "cuda" else None
    scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype is torch.float16)
    clip = recipe.get("clip_grad")
    eval_every = int(recipe.get("eval_every") or 0)

    start_epoch, step, history = 0, 0, []
    spent = {"wall_s": 0.0, "train_s": 0.0, "images": 0}
    partial = {}  # a stopped epoch's progress: batches done, running sums, seconds
    if state is not None:
        checkpoint.restore_module(model, state["model"], ckpt_path)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        if ema is not None:
            checkpoint.restore_module(ema, state["ema"], ckpt_path)
        if objective is not None:
            checkpoint.restore_module(objective, state["objective"], ckpt_path)
        rngs = state["rng"]
        rng = rngs[d.rank] if len(rngs) == d.world_size else rngs[0]
        checkpoint.set_rng_state(rng)
        start_epoch, step, history, spent = state["epoch"], state["step"], state["history"], state["spent"]
        switch = state.get("switch") or {}
        partial = state.get("partial") or {}
    else:
        random_seed(spec.seed, d.rank)

    train_model = model if objective is None else ObjectiveStep(model, objective)
    if d.world_size > 1:
        train_model = DistributedDataParallel(train_model,
                                              device_ids=[d.device.index] if d.device.type == "cuda" else None)
    if rt.compile:
        # Dynamo reuses a compiled graph for every later run of the same architecture in this process
        # (measured: the first run compiles, the next ones start at once); Inductor's on-disk cache spares
        # other processes most of the work, kept beside the runs (a shared cache dir serves every node)
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root() / "inductor"))
        train_model = torch.compile(train_model)

    probe_images = None
    if probes:
        probe_images = data.test.sample(rt.probe_batch)

    def probe_ctx(epoch: int) -> ProbeContext:
        return ProbeContext(cfg, d.device, probe_images[0], probe_images[1], epoch, step, list(history), spec)

    def save(next_epoch: int, **progress) -> None:
        """Checkpoint (every rank gathers its RNG state; rank 0 writes). ``progress``: a stopped epoch's."""
        rngs = _gather_rng(d)
        if d.is_main:
            checkpoint.save(ckpt_path, {
                "fingerprint": spec.fingerprint, "run_id": spec.run_id, "epoch": next_epoch, "step": step,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                "ema": ema.state_dict() if ema is not None else None,
                "objective": objective.state_dict() if objective is not None else None, "rng": rngs,
                "history": history, "spent": dict(spent, wall_s=spent["wall_s"] + time.perf_counter() - wall0),
                "switch": switch, "partial": progress})

    def stopped(where: str) -> preempt.Preempted:
        what = f"checkpointed at step {step} ({where})" if rt.persist else f"stopped at step {step}"
        why = preempt.cause() or f"stop_at={stop_at}"
        return preempt.Preempted(f"{why}: {spec.run_id} {what}; run the same command again to resume it")

    # ---- loop
    last_save = time.perf_counter()
    bar = tqdm(total=total_steps, initial=min(step, total_steps), desc=spec.run_id, leave=False,
               dynamic_ncols=True, disable=None if rt.progress and d.is_main else True)
    tb = TensorBoard(out_dir / "tb", rt.tensorboard and d.is_main and rt.persist)
    status, diverged_step = "finished", None
    global_batch = int(recipe["batch_size"])
    for epoch in range(start_epoch, epochs):
        if max_steps and step >= max_steps:
            break
        model.train()
        t_epoch = time.perf_counter() - partial.get("seconds", 0.0)
        loss_sum, n_loss, window = partial.get("loss_sum", 0.0), partial.get("n_loss", 0), []
        epoch_steps, term_sums = partial.get("steps", 0), dict(partial.get("term_sums") or {})
        batches = data.train.epoch(epoch)
        if partial:  # a stopped epoch: draw its trained batches again and drop them; their augmentation
            for _ in itertools.islice(batches, epoch_steps):  # drew from the global RNG too, so reset it
                pass
            checkpoint.set_rng_state(rng)
            partial = {}
        for x, y in batches:
            targets = y
            if mixup is not None:
                x, targets = mixup(x, y)
            with torch.autocast(d.device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                if objective is None:
                    logits = train_model(x)
                    loss = criterion(logits, targets)
                    for t in losses:
                        loss = loss + t.weight * t.term(x, targets, logits)
                else:
                    loss, terms = train_model(x, targets)
                    for k, v in terms.items():  # summed on the device: no host sync per step
                        term_sums[k] = term_sums.get(k, 0.0) + v.detach().float()
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            if clip:
                scaler.unscale_(optimizer)
                trained = [p for g in optimizer.param_groups for p in g["params"]]  # model and objective
                torch.nn.utils.clip_grad_norm_(trained, float(clip))
            scaler.step(optimizer)
            scaler.update()
            step += 1
            epoch_steps += 1
            if ema is not None:
                ema.update(model, step=step)
            scheduler.step_update(num_updates=step)
            window.append(loss.detach().float())
            bar.update()
            done = bool(max_steps) and step >= max_steps
            if len(window) >= rt.check_every or done:
                diverged_step = _first_nonfinite(window, step, d)
                if diverged_step is not None:
                    break
                loss_sum, n_loss, window = loss_sum + torch.stack(window).sum().item(), n_loss + len(window), []
                if not done and _stop(step, stop_at, d):
                    if rt.persist:
                        save(epoch, steps=epoch_steps, loss_sum=loss_sum, n_loss=n_loss,
                             term_sums={k: float(v) for k, v in term_sums.items()},
                             seconds=time.perf_counter() - t_epoch)
                    barrier(d)
                    raise stopped(f"epoch {epoch + 1}, batch {epoch_steps} of {steps_per_epoch}")
            if done:
                break
        if diverged_step is None and window:
            diverged_step = _first_nonfinite(window, step, d)
            loss_sum, n_loss = loss_sum + torch.stack(window).sum().item(), n_loss + len(window)
        if diverged_step is not None:
            status = "diverged"
            break
        scheduler.step(epoch + 1)
        if d.device.type == "cuda":
            torch.cuda.synchronize(d.device)
        epoch_s = time.perf_counter() - t_epoch
        spent["train_s"] += epoch_s
        spent["images"] += epoch_steps * global_batch
        row = {"epoch": epoch, "step": step, "train_loss": loss_sum / max(1, n_loss),
               "lr": optimizer.param_groups[0]["lr"], "epoch_s": epoch_s,
               "images_per_s": epoch_steps * global_batch / max(epoch_s, 1e-9)}
        row.update({f"loss_{k}": float(v) / max(1, epoch_steps) for k, v in term_sums.items()})
        last = epoch == epochs - 1 or (bool(max_steps) and step >= max_steps)
        if last or (eval_every and (epoch + 1) % eval_every == 0):
            row.update(evaluate(model, data.test, d, amp_dtype))
            if ema is not None:
                row.update(evaluate(ema.module, data.test, d, amp_dtype, prefix="ema_"))
        if probes and d.is_main:
            row.update(run_probes(probes, model, probe_ctx(epoch), epoch_end=True))
        history.append(_jsonable(row))
        if d.is_main:
            bar.write(summary_line(spec.run_id, row, epochs))
        stop = not last and _stop(step, stop_at, d)  # SIGTERM during evaluation or probes
        due = last or stop or time.perf_counter() - last_save >= rt.checkpoint_every_s
        if d.is_main and rt.persist:
            write_csv(out_dir / "log.csv", history)
            tb.log(history[-1])
        if rt.persist and any_rank(due, d):  # every rank takes part in gathering the RNG states: agree first
            save(epoch + 1)
            last_save = time.perf_counter()
        barrier(d)
        if stop:
            raise stopped(f"end of epoch {epoch + 1}")
    bar.close()
    tb.close()

    # ---- result
    wall_s = spent["wall_s"] + time.perf_counter() - wall0
    metrics = {"epochs": epochs, "steps": step, "steps_per_epoch": steps_per_epoch,
               "params": sum(p.numel() for p in model.parameters()), "history": history, **switch}
    evaluated = [r for r in history if "top1" in r]
    if evaluated:
        metrics.update({k: v for k, v in evaluated[-1].items() if k.startswith(("top", "ema_", "eval_"))})
        metrics["best_top1"] = max(r["top1"] for r in evaluated)
    if history:
        metrics.update({k: v for k, v in history[-1].items() if k == "train_loss" or k.startswith("loss_")})
    if status == "diverged":
        metrics["diverged_step"] = diverged_step
    elif probes and d.is_main:
        metrics.update(run_probes(probes, model, probe_ctx(epochs), epoch_end=False))
    provenance = {"wall_s": wall_s, "train_s": spent["train_s"],
                  "images_per_s": spent["images"] / spent["train_s"] if spent["train_s"] else None,
                  "bf16": amp_dtype is torch.bfloat16, "amp": str(amp_dtype).replace("torch.", "") if amp_dtype else None,
                  "compile": rt.compile, "deterministic": rt.deterministic, "data": data.info,
                  "fingerprint": spec.fingerprint}
    if source is not None:
        provenance["init_from"] = source.run_id
    return Result(status, _jsonable(metrics), provenance)
