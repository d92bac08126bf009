"""The engine's ``objective`` hook: a module that replaces criterion(model(images), targets), may change
the batch, runs the model itself, trains its own parameters, logs its terms and is checkpointed."""
import subprocess
import sys
import textwrap

import pytest
import timm
import torch
from timm.loss import SoftTargetCrossEntropy

from repro import records
from repro.cli import main
from repro.runs import ConfigError
from repro.train import checkpoint
from repro.train.hooks import build_objective
from repro.train.recipe import build_criterion, build_mixup, build_optimizer

from conftest import fast_args, subprocess_env

# Objectives of a fake paper. ConstantLabel trains every image towards class `label` whatever the batch
# says (so its effect on the model is unmistakable) and fits an extra head of its own on the logits.
OBJECTIVES = '''
import torch
import torch.nn.functional as F
from torch import nn

INSTANCES = []


class ConstantLabel(nn.Module):
    def __init__(self, model, criterion, num_classes, label=0):
        super().__init__()
        self.__dict__["model"] = model          # by reference: only the head is this module's own
        self.criterion, self.label = criterion, label
        self.head = nn.Linear(num_classes, num_classes)
        self.initial = self.head.weight.detach().clone()
        INSTANCES.append(self)

    def forward(self, images, targets):
        logits = self.model(images)
        y = torch.full((len(images),), self.label, dtype=torch.long, device=images.device)
        ce = F.cross_entropy(logits, y)
        aux = F.cross_entropy(self.head(logits.detach()), y)
        return ce + aux, {"ce": ce, "aux": aux}


class SyncCheck(ConstantLabel):
    """Under DDP: every step, the model's and the head's parameters must be equal on all ranks."""
    def forward(self, images, targets):
        import torch.distributed as dist
        if dist.is_initialized():
            mine = torch.stack([sum(p.detach().double().sum() for p in self.model.parameters()),
                                self.head.weight.detach().double().sum()])
            every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
            dist.all_gather(every, mine)
            for other in every:
                assert torch.allclose(other, mine, rtol=0, atol=1e-9), f"ranks out of sync: {every}"
        return super().forward(images, targets)


def not_a_module(model, criterion, num_classes):
    return lambda images, targets: (images.sum(), {})
'''


@pytest.fixture
def objectives(dirs):
    (dirs["papers"] / dirs["pid"] / "objectives.py").write_text(textwrap.dedent(OBJECTIVES))
    return f"papers.{dirs['pid']}.objectives"


def vit():
    return timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=1, embed_dim=32,
                             num_heads=2, num_classes=10)


# ------------------------------------------------------------------ parts

def test_objective_parameters_join_the_optimizer_with_timm_weight_decay_rule():
    model, extra = vit(), torch.nn.Linear(32, 10)
    recipe = {"opt": "adamw", "lr": 1e-3, "batch_size": 8, "weight_decay": 0.05}
    opt = build_optimizer(model, recipe, extra=extra)
    groups = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    assert groups[id(extra.weight)] == 0.05 and groups[id(extra.bias)] == 0.0
    assert len(groups) == len(list(model.parameters())) + 2
    # an objective holding the model as a submodule adds nothing twice
    holder = torch.nn.ModuleDict({"model": model, "head": extra})
    again = build_optimizer(model, recipe, extra=holder)
    assert sum(len(g["params"]) for g in again.param_groups) == len(groups)
    assert sum(len(g["params"]) for g in build_optimizer(model, recipe).param_groups) == len(groups) - 2


def test_build_objective_passes_model_criterion_classes_and_checks_the_result(dirs, objectives):
    model = vit()
    criterion = build_criterion({}, build_mixup({"mixup": 0.8, "cutmix": 1.0}, 10))
    assert build_objective(None, model, criterion, 10) is None and build_objective({}, model, criterion, 10) is None
    obj = build_objective({"fn": f"{objectives}:ConstantLabel", "label": 3}, model, criterion, 10)
    assert obj.model is model and isinstance(obj.criterion, SoftTargetCrossEntropy) and obj.label == 3
    assert obj.head.out_features == 10
    loss, terms = obj(torch.randn(2, 3, 32, 32), torch.tensor([1, 2]))
    assert set(terms) == {"ce", "aux"} and loss.item() == pytest.approx((terms["ce"] + terms["aux"]).item())
    with pytest.raises(ConfigError, match="nn.Module"):
        build_objective({"fn": f"{objectives}:not_a_module"}, model, criterion, 10)
    with pytest.raises(ConfigError, match="no attribute"):
        build_objective({"fn": f"{objectives}:missing"}, model, criterion, 10)


# ------------------------------------------------------------------ through the loop

def test_objective_replaces_the_default_loss_trains_its_head_and_logs_terms(dirs, objectives, capsys):
    pid = dirs["pid"]
    assert main(["reproduce", *fast_args(pid, "tables=[table2]", "recipe.epochs=3",
                                         f"+objective={{fn: '{objectives}:ConstantLabel', label: 0}}")]) == 0
    recs = sorted(records.load_records(pid, root=dirs["results"])[0], key=lambda r: r["run_id"])
    assert [r["status"] for r in recs] == ["finished", "finished"]
    m = recs[0]["metrics"]
    # every test image (4 per class) is now called class 0: exactly the 10 % of class 0 are right
    assert m["top1"] == pytest.approx(10.0)
    assert [set(h) >= {"loss_ce", "loss_aux"} for h in m["history"]] == [True] * 3
    assert m["loss_ce"] == m["history"][-1]["loss_ce"] and m["history"][-1]["loss_ce"] < m["history"][0]["loss_ce"]
    assert m["history"][0]["train_loss"] == pytest.approx(m["history"][0]["loss_ce"] + m["history"][0]["loss_aux"],
                                                          rel=1e-4)
    assert m["params"] == sum(p.numel() for p in vit().parameters())  # the model's own, not the head
    assert recs[0]["config"]["objective"] == {"fn": f"{objectives}:ConstantLabel", "label": 0}
    mod = sys.modules[objectives]
    assert not torch.equal(mod.INSTANCES[-1].head.weight.detach(), mod.INSTANCES[-1].initial)  # head trained

    # the objective is part of what a run measures: without it, the same cells get other run ids
    capsys.readouterr()
    assert main(["list", f"paper={pid}", "scale=tiny", "data=synthetic", "data.max_per_class=16",
                 "data.test_max_per_class=4", "recipe.batch_size=8", "recipe.epochs=3", "tables=[table2]"]) == 0
    assert "not run" in capsys.readouterr().out


def test_objective_state_is_checkpointed_and_restored(dirs, objectives, capsys):
    pid = dirs["pid"]
    args = fast_args(pid, "tables=[table2]", "shard=1", "num_shards=3", "recipe.epochs=2",
                     f"+objective={{fn: '{objectives}:ConstantLabel'}}")
    assert main(["reproduce", *args]) == 0
    (rec,) = records.load_records(pid, root=dirs["results"])[0]
    trained = sys.modules[objectives].INSTANCES[-1].state_dict()
    run = dirs["cache"] / "runs" / pid / "tiny" / rec["run_id"]
    saved = checkpoint.load(run / "last.pt", rec["provenance"]["fingerprint"])
    assert all(torch.equal(saved["objective"][k], v) for k, v in trained.items())
    assert [len(g["params"]) for g in saved["optimizer"]["param_groups"][-2:]] == [1, 1]  # head weight, bias
    records.record_path(pid, "tiny", rec["run_id"]).unlink()  # checkpoint only: the rerun resumes from it
    assert main(["reproduce", *args]) == 0
    assert "resume" in capsys.readouterr().out
    restored = sys.modules[objectives].INSTANCES[-1]
    assert restored is not sys.modules[objectives].INSTANCES[-2]
    assert all(torch.equal(restored.state_dict()[k], v) for k, v in trained.items())
    (again,) = records.load_records(pid, root=dirs["results"])[0]
    assert again["metrics"]["top1"] == rec["metrics"]["top1"] and again["metrics"]["steps"] == rec["metrics"]["steps"]


def test_objective_and_extra_losses_exclude_each_other(dirs, objectives, capsys):
    pid = dirs["pid"]
    code = main(["reproduce", *fast_args(pid, "tables=[table2]", f"+objective={{fn: '{objectives}:ConstantLabel'}}",
                                         f"losses=[{{fn: 'papers.{pid}.probes:nan_at'}}]")])
    assert code == 2 and "both 'objective' and 'losses'" in capsys.readouterr().err


@pytest.mark.slow
def test_objective_under_ddp_keeps_model_and_head_in_sync(dirs, objectives, tmp_path):
    pid = dirs["pid"]
    args = [sys.executable, "-m", "repro", "reproduce",
            *fast_args(pid, "tables=[table2]", "num_shards=2", "shard=1", "runtime.nproc_per_node=2",
                       "recipe.epochs=2", f"+objective={{fn: '{objectives}:SyncCheck'}}")]
    out = subprocess.run(args, env=subprocess_env(dirs), cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    (rec,) = records.load_records(pid, root=dirs["results"])[0]
    assert rec["status"] == "finished" and rec["provenance"]["world_size"] == 2
    assert rec["metrics"]["top1"] == pytest.approx(10.0) and "loss_aux" in rec["metrics"]
