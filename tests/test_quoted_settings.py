"""Every quoted number carries its own setting (issue 61): read from the committed reports, so each test fails
on a report that quotes a number under another setting than its own runs'."""
from __future__ import annotations

import csv
import json
from pathlib import Path

from repro.report.setting import joined, run_setting

ROOT = Path(__file__).resolve().parents[1]


def _screen(paper: str, scale: str = "cpu") -> dict:
    summary = json.loads((ROOT / "results" / paper / "summary.json").read_text())
    block = next(b for b in summary["first_screen"] if b["scale"] == scale)
    return {r["id"]: r for r in block["rows"]}


def test_augvit_probes_at_init_show_their_own_image_size_state_and_size():
    """no_collapse and beyond_identity rest on Aug-ViT-S at 224 px at initialisation, beyond_identity_relative on
    the small model at initialisation: none of them on the 32-px, 20-epoch training of the scale."""
    rows = _screen("augvit")
    for claim in ("no_collapse", "beyond_identity"):
        s = rows[claim]["setting"]
        assert s["img_size"] == [224] and s["state"] == ["at init"] and s["families"] == ["Aug-ViT"]
        assert "224 px · at init" in s["text"] and "22.1M" in s["text"] and "epochs" not in s["text"]
    rel = rows["beyond_identity_relative"]["setting"]
    assert rel["state"] == ["at init"] and "epochs" not in rel["text"] and rel["families"] == ["Aug-ViT"]
    page = (ROOT / "results" / "augvit" / "report.html").read_text()
    index = (ROOT / "results" / "index.html").read_text()
    for text in (page, index):
        assert rows["no_collapse"]["setting"]["text"] in text


def test_cells_csv_carries_image_size_state_family_and_device():
    rows = list(csv.DictReader((ROOT / "results" / "augvit" / "cells.csv").open()))
    init = next(r for r in rows if (r["table"], r["row"], r["column"]) == ("diversity_init", "augvit_s", "div_b"))
    assert (init["img_size"], init["state"], init["family"], init["device"]) == ("224", "at init", "Aug-ViT", "cpu")
    trained = next(r for r in rows if (r["table"], r["row"], r["column"]) == ("ablations", "augvit", "top1"))
    assert (trained["img_size"], trained["state"], trained["family"], trained["epochs"]) == ("32", "trained", "Aug-ViT", "20")


def test_a_comparison_pooling_hardware_says_so():
    rec = {"kind": "train", "config": {"model": {"name": "repro_deit_tiny"}, "data": {"img_size": 32}},
           "metrics": {"epochs": 5, "params": 5e5}}
    runs = [run_setting({**rec, "provenance": {"device": d}}) for d in ("cpu", "NVIDIA H100 80GB HBM3")]
    s = joined(runs)
    assert s["pooled"] and "pooled: NVIDIA H100 80GB HBM3 + cpu" in s["text"]
    assert not joined(runs[:1])["pooled"]
    cmhsa = _screen("cmhsa")["t1_two_phase_beats_single_phase"]["setting"]
    assert cmhsa["pooled"] and "pooled:" in cmhsa["text"]


def test_a_variant_is_named_by_what_it_builds():
    """A DeiT class with augmented shortcuts is an Aug-ViT; a Res-Post-LN block norm is named."""
    rec = {"kind": "train", "config": {"model": {"name": "repro_deit_tiny_c32", "kwargs": {"aug_paths": 2}}},
           "metrics": {}}
    assert run_setting(rec)["family"] == "Aug-ViT"
    rec["config"]["model"]["kwargs"] = {"norm": "res_post_ln"}
    assert run_setting(rec)["family"] == "DeiT (Res-Post-LN)"
