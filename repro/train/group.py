"""A cell's runs trained as one fused group (``runtime.fused=true``): setup per run, one loop, a result per
run (repro/run/packed.py takes their locks and writes their records).

Which runs fuse: training runs of one paper and scale whose configs are equal but for the seed and the
recipe keys a group lets differ (``fused.PER_RUN``: a cell's seeds, a grid's learning rates), on the fast
path's data (``data.pipeline=fastpath``, or the tensor pipeline under a recipe that draws nothing but crop
and flip, whose batches the fast path draws identically), with no extra losses, objective, probes, EMA,
init source or fp16; in one process. The others train alone, as before.
Each run keeps its own checkpoint (``<run dir>/last.pt``) in the engine's format, written at epoch ends
(``runtime.checkpoint_every_s``) and where a stop (SIGTERM, a deadline, ``stop_at``) lands: a group
resumes fused, or any of its runs resumes alone, where it stopped. Each record says it trained fused and
with which runs, and books its share of the group's wall time.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

import torch
from timm.utils import random_seed

from .. import records
from ..data import build_data, choose_pipeline
from ..runs import RunSpec, run_dir
from . import checkpoint, machine, precision, preempt
from .engine import Result, Runtime, evaluate, set_determinism
from .fused import PER_RUN, FusedRuns
from .logs import summary_line, write_csv
from .model import create_model
from .recipe import build_criterion, build_mixup, build_optimizer, run_epochs


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
    """Runs with the same key train as one group; None: this run trains alone."""
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


@dataclass
class _Member:
    spec: RunSpec
    data: object
    model: torch.nn.Module
    state: dict | None  # its checkpoint, if it may resume it (checkpoint.for_record)
    record: str         # the record it writes: its checkpoint names it, as the engine's does
    resumed_from: dict | None = None  # another record's checkpoint it resumes (named in its record)


def _member(spec: RunSpec, rt: Runtime) -> _Member:
    """A run's data and model as the engine builds them (same seed, same init), and its checkpoint."""
    random_seed(spec.seed)
    cfg = {**spec.config, "data": fast_data(spec.config)}
    data = build_data(cfg["data"], cfg["recipe"], seed=spec.seed, device=rt.dist.device)
    model = create_model(cfg, data.num_classes).to(rt.dist.device)
    state, path = None, run_dir(spec) / "last.pt"
    if rt.persist:  # its folder holds its checkpoint and log (a fresh clone, or a cleared cache, has none yet)
        run_dir(spec).mkdir(parents=True, exist_ok=True)
        state = checkpoint.load(path, spec.fingerprint)
    record = str(records.record_path(spec.paper, spec.scale, spec.run_id).resolve())
    recipe = cfg["recipe"]  # another folder's final checkpoint is not reused: a fresh folder measures again
    state, resumed_from = checkpoint.for_record(state, record, run_epochs(recipe, cfg["data"]),
                                                int(recipe.get("max_steps") or 0), path)
    if state is not None:
        checkpoint.restore_module(model, state["model"], path)
    return _Member(spec, data, model, state, record, resumed_from)


def _restore(fused: FusedRuns, members: list[_Member]) -> dict:
    """Moments, schedules and progress from the runs' checkpoints (all fresh, or all at one step)."""
    points = {(m.state["epoch"], m.state["step"]) if m.state else (0, 0) for m in members}
    if len(points) > 1:
        raise NotFusable(f"checkpoints at different points {sorted(points)}")
    for k, m in enumerate(members):
        if m.state is None:
            continue
        opt = build_optimizer(m.model, m.spec.config["recipe"])
        opt.load_state_dict(m.state["optimizer"])  # torch maps its saved state onto this model's parameters
        for name, p in m.model.named_parameters():
            if p in opt.state:
                fused.moments[name][0][k] = opt.state[p]["exp_avg"]
                fused.moments[name][1][k] = opt.state[p]["exp_avg_sq"]
        fused.schedulers[k].load_state_dict(m.state["scheduler"])
        fused.lr_holders[k].param_groups[0]["lr"] = opt.param_groups[0]["lr"]
    first = members[0].state or {}
    fused.step_count = first.get("step", 0)
    return {"epoch": first.get("epoch", 0), "partial": first.get("partial") or {},
            "history": [list((m.state or {}).get("history", [])) for m in members],
            "spent": [dict((m.state or {}).get("spent") or {"wall_s": 0.0, "train_s": 0.0, "images": 0}) for m in members]}


def _save(fused: FusedRuns, members: list[_Member], k: int, next_epoch: int, history: list, spent: dict,
          partial: dict) -> None:
    """Run k's checkpoint in the engine's format (its own weights, AdamW state, schedule and progress)."""
    m, recipe = members[k], members[k].spec.config["recipe"]
    m.model.load_state_dict(fused.model_state(k))
    opt = build_optimizer(m.model, recipe)
    for group in opt.param_groups:
        group["lr"] = fused.lr_holders[k].param_groups[0]["lr"]
    for name, p in m.model.named_parameters():
        opt.state[p] = {"step": torch.tensor(float(fused.step_count)), "exp_avg": fused.moments[name][0][k].clone(),
                        "exp_avg_sq": fused.moments[name][1][k].clone()}
    checkpoint.save(run_dir(m.spec) / "last.pt", {
        "fingerprint": m.spec.fingerprint, "run_id": m.spec.run_id, "record": m.record, "epoch": next_epoch,
        "step": fused.step_count,
        "model": m.model.state_dict(), "optimizer": opt.state_dict(), "scheduler": fused.schedulers[k].state_dict(),
        "scaler": torch.amp.GradScaler("cuda", enabled=False).state_dict(), "ema": None, "objective": None,
        "rng": [checkpoint.rng_state()], "history": history, "spent": spent, "switch": {}, "partial": partial})


class _Group:
    """K members, their fused model and their progress: what ``train_group`` loops over."""

    def __init__(self, specs: list[RunSpec], rt: Runtime, stop_at: int | None):
        self.wall0, self.rt, self.stop_at, self.d = time.perf_counter(), rt, stop_at, rt.dist
        set_determinism(rt)
        self.members = [_member(s, rt) for s in specs]
        m0 = self.members[0]
        self.recipe, self.ids = m0.spec.config["recipe"], [m.spec.run_id for m in self.members]
        self.epochs = run_epochs(self.recipe, m0.spec.config["data"])
        self.steps_per_epoch = m0.data.train.steps_per_epoch
        self.max_steps = int(self.recipe.get("max_steps") or 0)
        self.cpu_precision = m0.spec.config.get("cpu_precision")  # the same in every member: equal configs
        self.amp = precision.amp_dtype(self.d.device, "bf16" if rt.amp == "bf16" else "none", self.cpu_precision)
        criterion = build_criterion(self.recipe, build_mixup(self.recipe, m0.data.num_classes))
        self.fused = FusedRuns([m.model for m in self.members], [m.spec.config["recipe"] for m in self.members],
                               self.epochs, self.steps_per_epoch, criterion, self.amp, compile=rt.compile)
        progress = _restore(self.fused, self.members)
        self.start_epoch, self.partial = progress["epoch"], progress["partial"]
        self.history, self.spent = progress["history"], progress["spent"]
        self.diverged: list[int | None] = [None] * len(self.members)
        self.last_save = time.perf_counter()

    def train_epoch(self, epoch: int) -> None:
        """One epoch of fused steps (the rest of it, when resumed mid-epoch)."""
        k, p = len(self.members), self.partial
        steps = p.get("steps", 0)
        sums = torch.tensor(p.get("loss_sums") or [0.0] * k, device=self.d.device)
        t0 = time.perf_counter() - p.get("seconds", 0.0)
        loaders = [m.data.train.epoch(epoch) for m in self.members]
        for _ in range(steps):  # a stopped epoch: draw its trained batches again and drop them
            for it in loaders:
                next(it)
        self.partial = {}
        for batches in zip(*loaders):
            losses = self.fused.step(torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches]))
            steps += 1
            self._check(losses)
            sums += torch.nan_to_num(losses)
            if self.max_steps and self.fused.step_count >= self.max_steps:
                break
            if preempt.requested() or (self.stop_at is not None and self.fused.step_count >= self.stop_at):
                self._stop(epoch, steps, sums, time.perf_counter() - t0)
        self.tally = {"steps": steps, "sums": sums.tolist(), "seconds": time.perf_counter() - t0}

    def _check(self, losses: torch.Tensor) -> None:
        """Note each run's first non-finite loss (a host sync every ``check_every`` steps)."""
        if self.fused.step_count % max(1, self.rt.check_every) and self.d.device.type == "cuda":
            return
        for k, ok in enumerate(torch.isfinite(losses).tolist()):
            if not ok and self.diverged[k] is None:
                self.diverged[k] = self.fused.step_count

    def _stop(self, epoch: int, steps: int, sums: torch.Tensor, seconds: float):
        if self.rt.persist:
            for k in range(len(self.members)):
                self._save(k, epoch, {"steps": steps, "loss_sum": float(sums[k]), "n_loss": steps, "term_sums": {},
                                      "seconds": seconds, "loss_sums": sums.tolist()})
        why = preempt.cause() or f"stop_at={self.stop_at}"
        raise preempt.Preempted(f"{why}: fused group {', '.join(self.ids)} checkpointed at step "
                                f"{self.fused.step_count}; run the same command again to resume it")

    def _save(self, k: int, next_epoch: int, partial: dict) -> None:
        wall = time.perf_counter() - self.wall0
        spent = dict(self.spent[k], wall_s=self.spent[k]["wall_s"] + wall / len(self.members))
        _save(self.fused, self.members, k, next_epoch, self.history[k], spent, partial)

    def end_epoch(self, epoch: int) -> None:
        """Schedule, each run's row (evaluated when due), logs and checkpoints."""
        self.fused.end_epoch(epoch)
        t, batch = self.tally, int(self.recipe["batch_size"])
        last = epoch == self.epochs - 1 or (self.max_steps and self.fused.step_count >= self.max_steps)
        every = int(self.recipe.get("eval_every") or 0)
        due = last or (every and (epoch + 1) % every == 0)
        lrs = self.fused.lrs().tolist()
        for k, m in enumerate(self.members):
            self.spent[k]["train_s"] += t["seconds"]
            self.spent[k]["images"] += t["steps"] * batch
            if self.diverged[k] is not None:
                continue
            row = {"epoch": epoch, "step": self.fused.step_count, "train_loss": t["sums"][k] / max(1, t["steps"]),
                   "lr": lrs[k], "epoch_s": t["seconds"], "images_per_s": t["steps"] * batch / max(t["seconds"], 1e-9)}
            if due:
                m.model.load_state_dict(self.fused.model_state(k))
                row.update(evaluate(m.model, m.data.test, self.d, self.amp))
            self.history[k].append(records._jsonable(row))
            if self.rt.progress:
                print(summary_line(m.spec.run_id, row, self.epochs), flush=True)
        save = last or time.perf_counter() - self.last_save >= self.rt.checkpoint_every_s
        if self.rt.persist:
            for k, m in enumerate(self.members):
                write_csv(run_dir(m.spec) / "log.csv", self.history[k])
                if save:
                    self._save(k, epoch + 1, {})
            self.last_save = time.perf_counter() if save else self.last_save

    def results(self) -> list[Result]:
        wall = time.perf_counter() - self.wall0
        out = []
        for k, m in enumerate(self.members):
            hist, spent = self.history[k], self.spent[k]
            metrics = {"epochs": self.epochs, "steps": self.fused.step_count, "steps_per_epoch": self.steps_per_epoch,
                       "params": sum(p.numel() for p in m.model.parameters()), "history": hist}
            evaluated = [r for r in hist if "top1" in r]
            if evaluated:
                metrics.update({key: v for key, v in evaluated[-1].items() if key.startswith(("top", "eval_"))})
                metrics["best_top1"] = max(r["top1"] for r in evaluated)
            if hist:
                metrics["train_loss"] = hist[-1]["train_loss"]
            status = "finished" if self.diverged[k] is None else "diverged"
            if status == "diverged":
                metrics.update(diverged_step=self.diverged[k], steps=self.diverged[k])
            prov = {"wall_s": spent["wall_s"] + wall / len(self.members), "train_s": spent["train_s"],
                    "images_per_s": spent["images"] / spent["train_s"] if spent["train_s"] else None,
                    "bf16": self.amp is torch.bfloat16, "amp": "bfloat16" if self.amp else None,
                    "compile": bool(self.rt.compile),  # a fused group compiles its update (repro/train/fused.py)
                    "deterministic": self.rt.deterministic, "data": m.data.info, "fingerprint": m.spec.fingerprint,
                    "group_wall_s": wall, **machine.trained_how(m.spec.run_id, self.ids),
                    **precision.provenance(self.d.device, self.cpu_precision, self.amp)}
            if m.resumed_from:
                prov["resumed_from"] = m.resumed_from
            out.append(Result(status, records._jsonable(metrics), prov))
        return out


def train_group(specs: list[RunSpec], rt: Runtime, stop_at: int | None = None) -> list[Result]:
    """Train (or resume) the runs of one group together; a Result per run, in order."""
    g = _Group(specs, rt, stop_at)
    for epoch in range(g.start_epoch, g.epochs):
        if g.max_steps and g.fused.step_count >= g.max_steps:
            break
        g.train_epoch(epoch)
        g.end_epoch(epoch)
    return g.results()
