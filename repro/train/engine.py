"""One training run, top to bottom: setup, loop, evaluate, checkpoint, result.

A run resumes from its last checkpoint (an epoch end, or where SIGTERM stopped it) and replays the rest exactly:
data order and augmentation are seeded by (seed, epoch, rank), a stopped epoch's batches are drawn again and
skipped, and the global RNG states are restored. A non-finite loss stops the run as ``diverged``. One loop trains
one run, or K runs as one vmapped model (``runtime.fused``: fused.FusedRuns), each keeping its own checkpoint,
record and provenance."""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as torch_dist
from torch.nn.parallel import DistributedDataParallel
from timm.utils import random_seed
from tqdm import tqdm

from ..data import build_data
from ..probes.budget import probe_images
from ..records import _jsonable, record_path
from .machine import device_name, trained_how
from ..runs import ConfigError, RunSpec, Source, run_dir, source_spec
from . import checkpoint, precision, preempt
from .compiled import compile_module, graphed, step_begin
from .ddp import Dist, all_reduce, any_rank, barrier
from .fused import FusedRuns, NotFusable, fast_data
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
    amp: str = "bf16"            # bf16 | fp16 | none; autocast on CUDA (a CPU: the run's cpu_precision)
    compile: bool = False
    compile_mode: str = "default"  # torch.compile's mode (COMPILE_MODES)
    fused_optimizer: bool = False  # Adam/AdamW as torch's fused kernel
    deterministic: bool = False
    num_workers: int = 0
    progress: bool = True
    tensorboard: bool = False
    check_every: int = 1         # steps between non-finite checks (each is a host sync on GPU)
    persist: bool = True         # checkpoint, CSV log, TensorBoard; false for dry runs
    checkpoint_every_s: float = 0.0  # save at an epoch end once this long since the last save (0: every epoch)
    probe_batch: int = 64
    fused: bool = False          # train the runs that can as fused groups (fused.groups)


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
        with precision.autocast(d.device, amp_dtype):
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


def _first_nonfinite(window: torch.Tensor, step: int, d: Dist) -> int | None:
    """Step number of the first non-finite loss among the last len(window) steps (any rank), or None."""
    finite = torch.isfinite(window)
    if all_reduce((~finite).any().float(), d, torch_dist.ReduceOp.MAX).item() == 0:
        return None
    bad = (~finite).nonzero()
    return step - len(window) + 1 + (int(bad[0]) if len(bad) else 0)


def _stop(step: int, stop_at: int | None, d: Dist) -> bool:
    """Stop here (all ranks agree): SIGTERM arrived, or ``stop_at`` steps are done (checks and tests)."""
    return any_rank(preempt.requested() or (stop_at is not None and step >= stop_at), d)


def train(spec: RunSpec, rt: Runtime, stop_at: int | None = None, source: Source | None = None) -> Result:
    """Train (or resume) one run and evaluate it; rank 0 keeps checkpoint and logs. ``source``: the run it starts
    from, as the run stage loaded it (None in a dry run). On SIGTERM (or after ``stop_at`` steps) it checkpoints
    and raises preempt.Preempted; run again, it resumes there."""
    return train_runs([spec], rt, stop_at, [source])[0]


def train_runs(specs: list[RunSpec], rt: Runtime, stop_at: int | None = None, sources: list = ()) -> list[Result]:
    """``train`` for one run, or for K runs as one fused model (they must fuse: fused.group_key); a Result each.
    A fused group resumes together when its runs' checkpoints stand at one step, else NotFusable."""
    runs, step = _runs(specs, rt, stop_at, sources)
    for epoch in range(runs[0].start_epoch, runs[0].epochs):
        live = [r for r in runs if r.diverged_step is None]
        if live[0].max_steps and step.count >= live[0].max_steps:
            break
        if not _train_epoch(runs, step, epoch):  # every run's loss went non-finite
            break
        _end_epoch([r for r in runs if r.diverged_step is None], step, epoch)
    return [r.result() for r in runs]


def stepper(specs: list[RunSpec], rt: Runtime):
    """For the benchmarks: an endless stream of the runs' batches and the step that trains them (as ``train_runs``)."""
    runs, step = _runs(specs, rt, None)
    for r in runs:
        r.begin_epoch()
    return (b for epoch in itertools.count() for b in step.batches(epoch)), step


def _runs(specs: list[RunSpec], rt: Runtime, stop_at: int | None, sources=()) -> tuple[list, "_Plain | _Fused"]:
    runs = [_Run(s, rt, stop_at, len(specs) > 1, src) for s, src in itertools.zip_longest(specs, sources)]
    if len(runs) > 1:  # one clock: a fused run books its share of the group's wall time
        for r in runs:
            r.wall0, r.group = runs[0].wall0, [x.spec.run_id for x in runs]
    return runs, _Fused(runs) if len(runs) > 1 else _Plain(runs[0])


def _train_epoch(runs: list, step, epoch: int) -> bool:
    """One epoch of optimizer steps (the rest of it, when resumed mid-epoch); False once no run is finite."""
    live = [r for r in runs if r.diverged_step is None]
    for r in live:
        r.begin_epoch()
    lead, window = live[0], []
    for batch in step.batches(epoch):
        window.append(step(batch))
        done = bool(lead.max_steps) and step.count >= lead.max_steps
        if len(window) >= lead.rt.check_every or done:
            if not _add(runs, window):
                return False
            window = []
            if not done and _stop(step.count, lead.stop_at, lead.d):
                step.sync()
                for r in runs:
                    if r.diverged_step is None:
                        r.save_partial(epoch)
                barrier(lead.d)
                raise _stopped(runs, f"epoch {epoch + 1}, batch {lead.tally['steps']} of {lead.steps_per_epoch}")
        if done:
            break
    return _add(runs, window) if window else True


def _add(runs: list, window: list) -> bool:
    """Each finite run adds its column of a window of step losses (steps x runs); whether any is still finite."""
    losses = torch.stack(window)
    for k, r in enumerate(runs):
        if r.diverged_step is None:
            r.add(losses[:, k])
    return any(r.diverged_step is None for r in runs)


def _end_epoch(live: list, step, epoch: int) -> None:
    """Each run's row (evaluation when due, probes), logs and checkpoint; stops here on SIGTERM."""
    step.sync()
    for r in live:
        r.close_epoch(epoch)
    lead = live[0]
    last = lead.is_last(epoch)
    stop = not last and _stop(step.count, lead.stop_at, lead.d)  # SIGTERM during evaluation or probes
    save = last or stop or time.perf_counter() - lead.last_save >= lead.rt.checkpoint_every_s
    for r in live:
        r.keep(epoch, save)
    barrier(lead.d)
    if stop:
        raise _stopped(live, f"end of epoch {epoch + 1}")


def _stopped(runs: list, where: str) -> preempt.Preempted:
    r = runs[0]
    what = f"checkpointed at step {r.step} ({where})" if r.rt.persist else f"stopped at step {r.step}"
    why = preempt.cause() or f"stop_at={r.stop_at}"
    names = ", ".join(x.spec.run_id for x in runs)
    return preempt.Preempted(f"{why}: {'fused group ' if len(runs) > 1 else ''}{names} {what}; "
                             f"run the same command again to resume it")


class _Plain:
    """One run's own step: its model (under DDP or torch.compile), optimizer, scaler, EMA and loss terms."""

    def __init__(self, run: "_Run"):
        self.run = run

    @property
    def count(self) -> int:
        return self.run.step

    def batches(self, epoch: int):
        return self.run._batches(epoch)

    def __call__(self, batch) -> torch.Tensor:
        return self.run._step(*batch).reshape(1)

    def sync(self) -> None:
        pass


class _Fused:
    """K runs' steps as one vmapped model (fused.FusedRuns): their weights and AdamW moments live there while
    they train; ``sync`` writes them back into each run's own model and optimizer, to evaluate and checkpoint."""

    def __init__(self, runs: list):
        points = {(r.start_epoch, r.step) for r in runs}
        if len(points) > 1:
            raise NotFusable(f"checkpoints at different points {sorted(points)}")
        lead, self.runs = runs[0], runs
        if lead.amp_dtype is torch.float16:
            raise NotFusable("fp16 autocast needs a grad scaler per run")
        self.fused = FusedRuns([r.model for r in runs], [r.recipe for r in runs], lead.epochs,
                               lead.steps_per_epoch, lead.criterion, lead.amp_dtype, compile=lead.rt.compile,
                               schedules=[(r.optimizer, r.scheduler) for r in runs])
        self.fused.step_count = lead.step
        for k, r in enumerate(runs):
            self.fused.load_moments(k, r.model, r.optimizer)

    @property
    def count(self) -> int:
        return self.fused.step_count

    def batches(self, epoch: int):
        return zip(*(r._batches(epoch) for r in self.runs))

    def __call__(self, batches) -> torch.Tensor:
        losses = self.fused.step(torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches]))
        for r in self.runs:
            if r.diverged_step is None:
                r.step += 1
                r.tally["steps"] += 1
        return losses

    def sync(self) -> None:
        for k, r in enumerate(self.runs):
            if r.diverged_step is None:
                self.fused.store(k, r.model, r.optimizer)


def _record(spec: RunSpec) -> str:
    return str(record_path(spec.paper, spec.scale, spec.run_id).resolve())


def start_state(spec: RunSpec, path) -> tuple[dict | None, dict | None]:
    """The checkpoint at ``path`` that ``spec``'s run resumes (None: from scratch) and the reuse its record names
    (checkpoint.for_record): one decision for the engine and for the line that says resume or run."""
    state = checkpoint.load(path, spec.fingerprint)
    return checkpoint.for_record(state, _record(spec), run_epochs(spec.config["recipe"], spec.config["data"]),
                                 int(spec.config["recipe"].get("max_steps") or 0), path)


class _Run:
    """One run's state, from setup (fresh or from its checkpoint) to its Result: what ``train`` loops over."""

    def __init__(self, spec: RunSpec, rt: Runtime, stop_at: int | None, wide: bool = False, source: Source | None = None):
        self.wall0 = time.perf_counter()
        self.spec, self.rt, self.stop_at, self.d = spec, rt, stop_at, rt.dist
        self.cfg = {**spec.config, "data": fast_data(spec.config)} if wide else spec.config  # a fused run's batches
        self.recipe, self.group = spec.config["recipe"], None  # group: the run ids it trains fused with
        self.out_dir = run_dir(spec)
        if rt.persist and self.d.is_main:  # a fresh clone, or a cleared cache, has none yet
            self.out_dir.mkdir(parents=True, exist_ok=True)
        self.ckpt_path = self.out_dir / "last.pt"
        set_determinism(rt)
        random_seed(spec.seed)
        self.record = _record(spec)
        state, self.resumed_from = start_state(spec, self.ckpt_path) if rt.persist else (None, None)
        self._build(state is not None, source)
        self.start_epoch, self.step, self.history, self.diverged_step = 0, 0, [], None
        self.spent = {"wall_s": 0.0, "train_s": 0.0, "images": 0}
        self.partial = {}  # a stopped epoch's progress: batches done, running sums, seconds
        if state is not None:
            self._restore(state)
        else:
            random_seed(spec.seed, self.d.rank)
        self._note_device()
        self.train_model = None if wide else self._wrap()
        self.compiled_as = self.rt.compile_mode if self.rt.compile else None  # None: eager
        self.probe_images = self.data.test.sample(probe_images(spec.config, rt.probe_batch)) if self.probes else None
        self.last_save = time.perf_counter()
        self.bar = tqdm(total=self.total_steps, initial=min(self.step, self.total_steps), desc=spec.run_id,
                        leave=False, dynamic_ncols=True, disable=None if rt.progress and self.d.is_main and not wide else True)
        self.tb = TensorBoard(self.out_dir / "tb", rt.tensorboard and self.d.is_main and rt.persist)

    # ---- setup
    def _build(self, resuming: bool, source: Source | None) -> None:
        """Data, model (from its source run when fresh), loss terms, probes, optimiser and schedule."""
        cfg, recipe, d, spec = self.cfg, self.recipe, self.d, self.spec
        self.data = build_data(cfg["data"], recipe, seed=spec.seed, rank=d.rank, world=d.world_size,
                               device=d.device, num_workers=self.rt.num_workers)
        self.model = create_model(cfg, self.data.num_classes).to(d.device)
        self.source, self.switch = source_spec(spec), {}
        self.source_record = source.record if source else None  # for its probes (ProbeContext.source)
        if self.source is not None and not resuming:  # a resumed run's checkpoint already holds trained weights
            weights = getattr(source, "weights", None)
            if weights is None and self.rt.persist:  # only a dry run may start from an untrained source
                raise ValueError(f"run {spec.run_id} starts from {self.source.run_id}'s final model: pass it "
                                 f"(run/sources.py loads it)")
            src_model = init_from_source(self.model, spec, self.data.num_classes, d.device, weights)
            if self.source.config["data"].get("img_size") == cfg["data"].get("img_size"):  # else a fine-tune
                self.switch = switch_metrics(src_model, self.model, self.data.test, d)
            del src_model
        self.losses = build_losses(cfg.get("losses"), self.model)
        self.probes = probe_list(cfg.get("probes"))
        self.mixup = build_mixup(recipe, self.data.num_classes)
        self.criterion = build_criterion(recipe, self.mixup)
        self.objective = build_objective(cfg.get("objective"), self.model, self.criterion, self.data.num_classes)
        if self.objective is not None:
            if self.losses:
                raise ConfigError("config sets both 'objective' and 'losses': extra loss terms read the engine's "
                                  "own logits, which an objective replaces; compute them inside the objective")
            self.objective.to(d.device)
        self.ema = build_ema(self.model, recipe)
        self.optimizer = build_optimizer(self.model, recipe, extra=self.objective, fused=self.rt.fused_optimizer)
        self.epochs, self.steps_per_epoch = run_epochs(recipe, cfg["data"]), self.data.train.steps_per_epoch
        self.max_steps = int(recipe.get("max_steps") or 0)
        self.total_steps = min(self.epochs * self.steps_per_epoch, self.max_steps or self.epochs * self.steps_per_epoch)
        self.scheduler = build_scheduler(self.optimizer, recipe, self.epochs, self.steps_per_epoch)
        self.amp_dtype = precision.amp_dtype(d.device, self.rt.amp, cfg.get("cpu_precision"))
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.amp_dtype is torch.float16)
        self.clip, self.eval_every = recipe.get("clip_grad"), int(recipe.get("eval_every") or 0)
        self.global_batch = int(recipe["batch_size"])

    def _restore(self, state: dict) -> None:
        """Weights, optimiser, schedule, RNG and progress from the run's checkpoint."""
        for key, module in (("model", self.model), ("ema", self.ema), ("objective", self.objective)):
            if module is not None:
                checkpoint.restore_module(module, state[key], self.ckpt_path)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        rngs = state["rng"]
        self.rng = rngs[self.d.rank] if len(rngs) == self.d.world_size else rngs[0]
        checkpoint.set_rng_state(self.rng)
        self.start_epoch, self.step, self.history = state["epoch"], state["step"], state["history"]
        self.spent, self.switch = state["spent"], state.get("switch") or {}
        self.partial = state.get("partial") or {}

    def _note_device(self) -> None:
        """Where each stretch of the run trained: a run stopped on one machine and resumed on another
        (a CPU campaign finished on a GPU) says so in its record rather than naming the last device alone."""
        here = device_name(self.d.device)
        trail = self.spent.setdefault("devices", [])
        if not trail or (trail[-1]["device"] != here and self.step < self.total_steps):
            trail.append({"device": here, "from_epoch": self.start_epoch, "from_step": self.step})

    def _wrap(self):
        """The module the loop calls: the model (or model + objective), under DDP and torch.compile if asked."""
        d = self.d
        train_model = self.model if self.objective is None else ObjectiveStep(self.model, self.objective)
        if d.world_size > 1:
            train_model = DistributedDataParallel(train_model,
                                                  device_ids=[d.device.index] if d.device.type == "cuda" else None)
        if self.rt.compile:
            # Dynamo reuses a compiled graph for every later run of the same architecture in this process
            # (measured: the first run compiles, the next ones start at once)
            train_model = compile_module(train_model, self.rt.compile_mode)
        return train_model

    # ---- loop
    def begin_epoch(self) -> None:
        p = self.partial
        self.tally = {"t0": time.perf_counter() - p.get("seconds", 0.0), "loss_sum": p.get("loss_sum", 0.0),
                      "n_loss": p.get("n_loss", 0), "steps": p.get("steps", 0),
                      "term_sums": dict(p.get("term_sums") or {})}
        self.model.train()

    def _batches(self, epoch: int):
        batches = self.data.train.epoch(epoch)
        if self.partial:  # a stopped epoch: draw its trained batches again and drop them; their augmentation
            for _ in itertools.islice(batches, self.tally["steps"]):  # drew from the global RNG too, so reset it
                pass
            checkpoint.set_rng_state(self.rng)
            self.partial = {}
        return batches

    def _step(self, x, y) -> torch.Tensor:
        """One optimizer step on a batch; returns its loss, still on the device (no host sync)."""
        targets = y
        if self.mixup is not None and not getattr(self.data.train, "mixes", False):  # the fast path mixes itself
            x, targets = self.mixup(x, y)
        step_begin(self.compiled_as, self.d.device)
        with precision.autocast(self.d.device, self.amp_dtype):
            if self.objective is None:
                logits = self.train_model(x)
                loss = self.criterion(logits, targets)
                for t in self.losses:
                    loss = loss + t.weight * t.term(x, targets, logits)
            else:
                loss, terms = self.train_model(x, targets)
                sums = self.tally["term_sums"]
                for k, v in terms.items():  # summed on the device: no host sync per step
                    sums[k] = sums.get(k, 0.0) + v.detach().float()
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.clip:
            self.scaler.unscale_(self.optimizer)
            trained = [p for g in self.optimizer.param_groups for p in g["params"]]  # model and objective
            torch.nn.utils.clip_grad_norm_(trained, float(self.clip))
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.step += 1
        self.tally["steps"] += 1
        if self.ema is not None:
            self.ema.update(self.model, step=self.step)
        self.scheduler.step_update(num_updates=self.step)
        self.bar.update()
        loss = loss.detach().float()
        return loss.clone() if graphed(self.compiled_as, self.d.device) else loss  # a graph's output is rewritten next step

    def add(self, window: torch.Tensor) -> None:
        """Add a window of step losses to the epoch's sum, unless one is non-finite (then: where)."""
        self.diverged_step = _first_nonfinite(window, self.step, self.d)
        if self.diverged_step is None:
            self.tally["loss_sum"] += window.sum().item()
            self.tally["n_loss"] += len(window)

    def save_partial(self, epoch: int) -> None:
        """Checkpoint a stopped epoch's progress, to resume at its next batch."""
        t = self.tally
        if self.rt.persist:
            self.save(epoch, steps=t["steps"], loss_sum=t["loss_sum"], n_loss=t["n_loss"],
                      term_sums={k: float(v) for k, v in t["term_sums"].items()}, seconds=time.perf_counter() - t["t0"])

    # ---- evaluate, checkpoint
    def is_last(self, epoch: int) -> bool:
        return epoch == self.epochs - 1 or (bool(self.max_steps) and self.step >= self.max_steps)

    def close_epoch(self, epoch: int) -> None:
        """Schedule, time and the epoch's row (evaluation when due, probes)."""
        self.scheduler.step(epoch + 1)
        if self.d.device.type == "cuda":
            torch.cuda.synchronize(self.d.device)
        epoch_s = time.perf_counter() - self.tally["t0"]
        self.spent["train_s"] += epoch_s
        self.spent["images"] += self.tally["steps"] * self.global_batch
        last = self.is_last(epoch)
        self.history.append(_jsonable(self._row(epoch, epoch_s, evaluate_now=last or (
            self.eval_every and (epoch + 1) % self.eval_every == 0))))
        if self.d.is_main:
            self.bar.write(summary_line(self.spec.run_id, self.history[-1], self.epochs))

    def keep(self, epoch: int, save: bool) -> None:
        """The epoch's logs, and its checkpoint when ``save`` (on any rank: every rank gathers its RNG state)."""
        if self.d.is_main and self.rt.persist:
            write_csv(self.out_dir / "log.csv", self.history)
            self.tb.log(self.history[-1])
        if self.rt.persist and any_rank(save, self.d):
            self.save(epoch + 1)
            self.last_save = time.perf_counter()

    def _row(self, epoch: int, epoch_s: float, evaluate_now: bool) -> dict:
        t = self.tally
        row = {"epoch": epoch, "step": self.step, "train_loss": t["loss_sum"] / max(1, t["n_loss"]),
               "lr": self.optimizer.param_groups[0]["lr"], "epoch_s": epoch_s,
               "images_per_s": t["steps"] * self.global_batch / max(epoch_s, 1e-9)}
        row.update({f"loss_{k}": float(v) / max(1, t["steps"]) for k, v in t["term_sums"].items()})
        if evaluate_now:
            row.update(evaluate(self.model, self.data.test, self.d, self.amp_dtype))
            if self.ema is not None:
                row.update(evaluate(self.ema.module, self.data.test, self.d, self.amp_dtype, prefix="ema_"))
        if self.probes and self.d.is_main:
            row.update(run_probes(self.probes, self.model, self._probe_ctx(epoch), epoch_end=True))
        return row

    def _probe_ctx(self, epoch: int) -> ProbeContext:
        images, labels = self.probe_images
        return ProbeContext(self.cfg, self.d.device, images, labels, epoch, self.step, list(self.history), self.spec,
                            self.source_record)

    def save(self, next_epoch: int, **progress) -> None:
        """Checkpoint (every rank gathers its RNG state; rank 0 writes). ``progress``: a stopped epoch's."""
        rngs = _gather_rng(self.d)
        if self.d.is_main:
            checkpoint.save(self.ckpt_path, {
                "fingerprint": self.spec.fingerprint, "run_id": self.spec.run_id, "record": self.record,
                "epoch": next_epoch,
                "step": self.step, "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                "ema": self.ema.state_dict() if self.ema is not None else None,
                "objective": self.objective.state_dict() if self.objective is not None else None, "rng": rngs,
                "history": self.history,
                "spent": dict(self.spent, wall_s=self.spent["wall_s"] + self._wall()),
                "switch": self.switch, "partial": progress})

    def _wall(self) -> float:
        """Seconds since this process took the run up: a fused run's share of its group's."""
        return (time.perf_counter() - self.wall0) / len(self.group or [self])

    # ---- result
    def result(self) -> Result:
        """Final metrics (last evaluation, best top-1, end-of-run probes) and the run's provenance."""
        self.bar.close()
        self.tb.close()
        history, status = self.history, "finished" if self.diverged_step is None else "diverged"
        metrics = {"epochs": self.epochs, "steps": self.step, "steps_per_epoch": self.steps_per_epoch,
                   "params": sum(p.numel() for p in self.model.parameters()), "history": history, **self.switch}
        evaluated = [r for r in history if "top1" in r]
        if evaluated:
            metrics.update({k: v for k, v in evaluated[-1].items() if k.startswith(("top", "ema_", "eval_"))})
            metrics["best_top1"] = max(r["top1"] for r in evaluated)
        if history:
            metrics.update({k: v for k, v in history[-1].items() if k == "train_loss" or k.startswith("loss_")})
        if status == "diverged":
            metrics["diverged_step"] = self.diverged_step
        elif self.probes and self.d.is_main:
            metrics.update(run_probes(self.probes, self.model, self._probe_ctx(self.epochs), epoch_end=False))
        return Result(status, _jsonable(metrics), self._provenance())

    def _provenance(self) -> dict:
        spent, amp = self.spent, self.amp_dtype
        provenance = {"wall_s": spent["wall_s"] + self._wall(), "train_s": spent["train_s"],
                      "images_per_s": spent["images"] / spent["train_s"] if spent["train_s"] else None,
                      "bf16": amp is torch.bfloat16, "amp": str(amp).replace("torch.", "") if amp else None,
                      "compile": self.rt.compile, "deterministic": self.rt.deterministic, "data": self.data.info,
                      "fingerprint": self.spec.fingerprint, **trained_how(self.spec.run_id, self.group or ()),
                      **precision.provenance(self.d.device, self.cfg.get("cpu_precision"), amp)}
        rt, devices = self.rt, spent.get("devices", [])
        optional = {"compile_mode": rt.compile and rt.compile_mode, "fused_optimizer": rt.fused_optimizer,
                    "group_wall_s": bool(self.group) and time.perf_counter() - self.wall0,
                    "init_from": self.source is not None and self.source.run_id, "resumed_from": self.resumed_from,
                    "devices": len(devices) > 1 and devices}
        return {**provenance, **{k: v for k, v in optional.items() if v}}  # each only where it applies
