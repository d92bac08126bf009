"""ConViT's experiments: specs at every scale fill cells paper.yaml has, pointers find their sources,
Table 1's counts agree with timm, the ablation switches do what Table 3 says, reuse works end to end."""
import pytest
import timm
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from papers.convit import experiments, table1
from papers.convit.probes import gpsa_modules
from repro import records
from repro.plan.build import plan
from repro.run.specs import select
from repro.run.sources import InitError, load
from repro.runs import RunSpec, pointer, pointer_source, resolve, run_dir, source_spec
from repro.paper import load_paper
from repro.train import ddp
from repro.train.engine import Runtime
from repro.train.execute import execute
from repro.train.model import register_models
from repro.train.recipe import run_epochs

from conftest import REPO

PAPER = load_paper(REPO / "papers" / "convit" / "paper.yaml")
register_models("convit")


def composed(scale: str, *extra: str) -> dict:
    with initialize_config_dir(config_dir=str(REPO / "repro" / "conf"), version_base=None):
        cfg = compose("config", overrides=[f"scale={scale}", "paper=convit", *extra])
    return OmegaConf.to_container(cfg, resolve=True)


@pytest.mark.parametrize("scale,mode", [("tiny", None), ("tiny", "smoke"), ("small", None), ("full", None),
                                        ("full", "dry_run")])
def test_specs_fill_existing_cells_and_pointers_find_their_sources(scale, mode):
    c = composed(scale, *([f"{mode}=true"] if mode else []))
    doc = plan(c)
    specs = select(c, doc)
    assert {f["run_id"] for f in doc["fills"]} <= {s.run_id for s in specs}  # a filled cell names a planned run
    seen: dict[str, RunSpec] = {}
    for s in [*specs, *(RunSpec("convit", f["table"], f["cell"], doc["scale"]) for f in doc["fills"])]:
        table = PAPER.table(s.table)
        assert table is not None and table.reproduced, s.run_id
        assert table.row(s.cell["row"]) is not None, s.run_id
        for col in s.cell["columns"]:
            assert table.column(col) is not None and not table.column(col).derived, (s.run_id, col)
        if "source" in s.config and s.kind == "probe":  # the same resolved config, hence the same run id, as the source itself
            src = pointer_source(s.config)
            assert src.run_id in seen and seen[src.run_id].config == src.config, s.run_id
        seen[s.run_id] = s
    reproduced = {t.id for t in PAPER.tables if t.reproduced}
    assert {s.table for s in seen.values()} == reproduced and "table4" not in reproduced
    # every measured cell of every reproduced table is filled by some run at every scale
    filled = {tuple(cell) for cell in doc["cells"]}
    for t in PAPER.tables:
        if t.reproduced:
            want = {(t.id, r.key, c.key) for r in t.rows for c in t.columns if not c.derived}
            if scale != "full" and t.id == "table1":  # top-1/top-5 of the Ti pair only below full
                want = {w for w in want if w[2] not in ("top1", "top5") or w[1].endswith("_ti")}
            controls = experiments.PROTOCOL[scale].get("control", {})  # ours, not the paper's: where run
            want = {w for w in want if not w[2].startswith("deit9_") or "deit9" in controls}
            assert want <= filled, sorted(want - filled)[:5]


def test_scale_protocols():
    tiny, small, full = (experiments.runs(s) for s in ("tiny", "small", "full"))
    t2_small = [s for s in small if s.table == "table2"]
    assert len(t2_small) == 5 * 3 * 3 and {s.seed for s in t2_small} == {0, 1, 2}  # the pair and the control
    assert {s.config["model"]["name"] for s in t2_small} == {"repro_deit_tiny_c32", "repro_convit_tiny9_c32"}
    built = {s.name: timm.create_model(s.config["model"]["name"], **s.config["model"]["kwargs"]) for s in t2_small}
    shape = {name: (m.blocks[0].attn.num_heads, m.embed_dim, len(m.blocks)) for name, m in built.items()}
    assert shape == {"deit": (6, 192, 12), "convit": (9, 216, 12),  # the paper's 6 / 9 heads, 384 / 432 widths
                     "deit9": (9, 216, 12)}  # and a DeiT of ConViT's own size: the control for capacity
    size = {name: sum(p.numel() for p in m.parameters()) for name, m in built.items()}
    assert abs(size["deit9"] / size["convit"] - 1) < 0.01 < size["convit"] / size["deit"] - 1
    # full: the 12 Table 1 models trained, "+" models at lr 4e-4 and batch 512; Table 3 on S+
    t1_full = {s.cell["row"]: s for s in full if s.table == "table1" and s.kind == "train"}
    assert len(t1_full) == 12
    assert t1_full["convit_b_plus"].config["recipe"]["base_lr"] == 4e-4
    assert t1_full["convit_b_plus"].config["recipe"]["batch_size"] == 512
    assert "base_lr" not in t1_full["convit_b"].config["recipe"]
    t3_full = [s for s in full if s.table == "table3" and s.kind == "train"]
    assert {s.config["model"]["name"] for s in t3_full} == {"repro_convit_small_plus", "repro_deit_small_plus"}
    # Table 6's k and Figure 8's GPSA counts fit each scale's depth; one MHSA block always remains
    for scale, specs in (("tiny", tiny), ("small", small)):
        depth = experiments.PROTOCOL[scale]["pair"]["convit"][1].get("depth", 12)
        gpsa = experiments.PROTOCOL[scale]["gpsa_layers"]
        assert all(1 <= s.config["args"]["k"] <= gpsa for s in specs if s.table == "table6")
        for s in specs:
            if s.table == "fig8_gpsa_layers" and s.kind == "train":
                assert s.config["model"]["kwargs"]["gpsa_layers"] < depth
    # Table 2's runs on all the data record locality every epoch; the others do not pay for it
    f100 = [s for s in tiny if s.table == "table2" and s.cell["row"] == "f100"]
    assert all(s.config["probes"] == [experiments.LOCALITY_PROBE] for s in f100)
    assert not any(s.config.get("probes") for s in tiny if s.table == "table2" and s.cell["row"] != "f100")


def test_tiny_fractions_make_whole_batches_and_equal_steps():
    """batch 50 and 200 images per class: every fraction takes the same number of steps (as Table 2 intends)."""
    p = experiments.PROTOCOL["tiny"]
    recipe = {"epochs": p["epochs"], "scale_epochs_with_fraction": True}
    steps = set()
    for f in experiments.FRACTIONS.values():
        images = 10 * int(p["data"]["max_per_class"] * f)
        assert images % p["recipe"]["batch_size"] == 0
        steps.add(images // p["recipe"]["batch_size"] * run_epochs(recipe, {"fraction": f}))
    assert steps == {120}


@pytest.mark.parametrize("ours,timm_name,heads,dim", [("repro_deit_tiny", "deit_tiny_patch16_224", 3, 192),
                                                      ("repro_convit_tiny", "convit_tiny", 4, 192)])
def test_table1_counts_agree_with_timm(ours, timm_name, heads, dim):
    got = table1.count(ours)
    ref = timm.create_model(timm_name)
    assert got["params"] == sum(p.numel() for p in ref.parameters())
    assert (got["heads"], got["dim"]) == (heads, dim)
    assert 1.0e9 < got["macs_no_attn"] < got["macs"] < 1.4e9  # printed "1G"


def test_table1_flops_convention_and_probe_record():
    deit_s = table1.count("repro_deit_small")
    assert round(deit_s["macs_no_attn"] / 1e9, 2) == 4.24 and round(deit_s["macs"] / 1e9, 2) == 4.60
    out = table1.measure({"args": {"model": "repro_deit_tiny", "img_size": 64,
                                   "speed": {"batch": 2, "steps": 1, "warmup": 0}}})
    assert out["params"] == table1.count("repro_deit_tiny", 64)["params"] and out["images_per_s"] > 0
    assert out["speed_batch"] == 2 and out["speed_device"] == "cpu" and out["img_size"] == 64
    with pytest.raises(ValueError, match="args"):
        table1.measure({})


def test_table3_switches():
    model, kwargs = experiments.PROTOCOL["tiny"]["pair"]["convit"]
    built = {row: timm.create_model(model, num_classes=10, **{**kwargs, **change})
             for row, change in experiments.TABLE3.items()}
    gates = gpsa_modules(built["no_gating"])
    assert all(not g.gating_param.requires_grad and torch.all(g.gating_param == 0) for g in gates)
    for row in ("frozen_conv_init", "frozen_random_init"):
        assert all(not p.requires_grad for g in gpsa_modules(built[row]) for p in g.parameters())
        assert all(p.requires_grad for b in built[row].blocks[len(gates):] for p in b.parameters())
    # the convolutional init sets v = identity; random init does not
    eye = torch.eye(kwargs["embed_dim"])
    assert torch.equal(gpsa_modules(built["frozen_conv_init"])[0].v.weight, eye)
    assert not torch.equal(gpsa_modules(built["no_conv_init"])[0].v.weight, eye)


def test_pointer_probes_the_source_run(tmp_path, monkeypatch):
    """A pointer probes its source's checkpoint, which the run stage loads and hands to the probe function; it
    never trains the source: one with no record, or whose checkpoint is gone, is one line naming what to run,
    and nothing is written."""
    monkeypatch.setenv("REPRO_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "cache"))
    base = composed("tiny", "data=synthetic")
    model, kwargs = experiments.PROTOCOL["tiny"]["pair"]["convit"]
    src = RunSpec("convit", "table2", {"row": "f100", "columns": {"convit_top1": "top1"}}, "tiny", name="convit",
                  config={"model": {"name": model, "kwargs": {**kwargs, "embed_dim": 24}},
                          "data": {"max_per_class": 10, "test_max_per_class": 5},
                          "recipe": {"epochs": 1, "batch_size": 10, "mixup": 0, "cutmix": 0}})
    mask = resolve(pointer(src, "table6", {"row": "k3", "columns": {"mask_none": "top1_none"}}, "convit",
                                 probe="convit.table6_run", args={"k": 1, "k_paper": 3}), base)
    src = resolve(src, base)
    assert pointer_source(mask.config).run_id == src.run_id and source_spec(src) is None
    rt = Runtime(dist=ddp.setup("cpu"), progress=False)
    with pytest.raises(InitError, match=r"has not run yet: run `python -m repro reproduce paper=convit "
                                        r"scale=tiny tables=table2` first"):
        load(pointer_source(mask.config))
    assert not list((tmp_path / "results").rglob("*.json")) and not run_dir(src).exists()
    execute(src, rt)                          # what the scheduler does first (the plan's dependency)
    source = records.read_record(records.record_path("convit", "tiny", src.run_id))
    loaded = load(pointer_source(mask.config))
    assert loaded.spec.run_id == src.run_id and loaded.record == source
    final = torch.load(run_dir(src) / "last.pt", weights_only=True)["model"]
    assert loaded.weights.keys() == final.keys() and all(torch.equal(loaded.weights[k], final[k]) for k in final)
    masked = execute(mask, rt, source=loaded)["metrics"]  # the checkpoint is probed, not retrained
    assert masked["top1_none"] == pytest.approx(source["metrics"]["top1"])
    assert masked["k_used"] == 1 and masked["gpsa_layers"] == kwargs["gpsa_layers"]
    assert masked["source_run_id"] == src.run_id
    (run_dir(src) / "last.pt").unlink()
    with pytest.raises(InitError, match=r"is gone .*delete .*tables=table2` to retrain it"):
        load(pointer_source(mask.config))
    assert not (run_dir(src) / "last.pt").exists()


def test_cpu_table2_has_an_equal_size_deit_and_table3_judges_low_data_on_every_trainable_variant():
    cpu = [s for s in experiments.runs("cpu") if s.table == "table2"]
    built = {s.name: timm.create_model(s.config["model"]["name"], **s.config["model"]["kwargs"]) for s in cpu}
    size = {name: sum(p.numel() for p in m.parameters()) for name, m in built.items()}
    assert abs(size["deit9"] / size["convit"] - 1) < 0.01 and size["convit"] / size["deit"] > 1.2
    assert {(s.cell["row"], s.seed) for s in cpu if s.name == "deit9"} == {(f, k) for f in ("f10", "f100") for k in range(3)}
    # Table 3's low-data claims are about every trainable-GPSA variant (a-d): cpu trains b-d at 10 %, 3 seeds
    t3 = [s for s in experiments.runs("cpu") if s.table == "table3"]
    assert {s.cell["row"] for s in t3} == {"convit", "deit", "no_gating", "no_conv_init", "neither"}
    trained_in_t2 = {s.fingerprint for s in cpu}  # rows a and e: cells Table 2's runs fill
    assert {(s.cell["row"], s.seed) for s in t3 if s.fingerprint not in trained_in_t2} == {
        (r, k) for r in ("no_gating", "no_conv_init", "neither") for k in range(3)}
    assert all(s.config["data"]["fraction"] == 0.1 and list(s.cell["columns"]) == ["top1_10"] for s in t3)
    assert {"t3_gpsa_beats_deit_low_data", "t3_components_help_low_data"} <= set(experiments.RESOLVES["cpu"])
    assert "t2_convit_ahead_of_equal_size_deit" in experiments.RESOLVES["cpu"]
