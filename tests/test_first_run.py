"""A GPU user's first run: small trains on data they can download (or is told in one line where to get
it), a fresh clone rebuilds its reports from the committed records with no data at all, and the
committed tiny and cpu records keep their run ids."""
from __future__ import annotations

import re
import shutil
import urllib.error
import urllib.request

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from repro import records
from repro.cli import main
from repro.plan.experiments import known_papers, paper_scales
from repro.report.provenance import data_label
from repro.train.model import register_models

from conftest import REPO, build_specs, fast_args
from test_cli import one_line_error, snapshot
from test_reliability import _jpeg_args, _jpeg_dataset


def _config(*overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(REPO / "repro" / "conf"), version_base=None):
        return OmegaConf.to_container(compose("config", overrides=list(overrides)), resolve=True)


@pytest.mark.parametrize("scale", ["tiny", "cpu"])
def test_committed_records_keep_their_run_ids(scale):
    """Every committed tiny / cpu record is still one of its paper's runs: the small scale's switch to
    torchvision's CIFAR-10 and the download flag left these ids alone."""
    checked = 0
    for paper in known_papers():
        folder = REPO / "results" / paper / scale / "records"
        if scale not in paper_scales(paper) or not folder.is_dir():
            continue
        checked += 1
        register_models(paper)
        ids = {s.run_id for s in build_specs({**_config(f"scale={scale}"), "paper": paper})}
        committed = {p.stem for p in folder.glob("*.json")}
        assert committed and committed <= ids, (paper, sorted(committed - ids)[:3])
    assert checked == 6  # every paper has committed records at tiny and at cpu


def test_small_and_full_train_on_data_one_can_download():
    small, full = _config("scale=small"), _config("scale=full")
    assert small["data"]["name"] == "cifar10" and small["data"]["download"] is True
    assert full["data"]["name"] == "imagenet" and full["data"]["download"] is True
    assert _config("scale=tiny")["data"]["name"] == _config("scale=cpu")["data"]["name"] == "cifar10_jpeg"


def test_download_flag_does_not_change_run_ids():
    register_models("convit")
    ids = [[s.run_id for s in build_specs({**_config("scale=small", f"data.download={flag}"), "paper": "convit"})]
           for flag in ("true", "false")]
    assert ids[0] == ids[1] and ids[0]
    jpeg = build_specs({**_config("scale=small", "data=cifar10_jpeg"), "paper": "convit"})
    assert not {s.run_id for s in jpeg} & set(ids[0])  # another dataset: other runs, other records


def test_small_offline_on_the_jpeg_copy_is_the_same_protocol_labelled_as_its_dataset():
    """A GPU without internet trains small on the JPEG copy (data=cifar10_jpeg): the same runs, models and
    recipes as on torchvision's CIFAR-10, each labelled "CIFAR-10 (JPEG q75)" where its results are reported."""
    register_models("convit")
    pairs = list(zip(build_specs({**_config("scale=small"), "paper": "convit"}),
                     build_specs({**_config("scale=small", "data=cifar10_jpeg"), "paper": "convit"}), strict=True))
    train = [(a, b) for a, b in pairs if a.kind == "train"]
    assert train and all((a.table, a.cell, a.seed) == (b.table, b.cell, b.seed) for a, b in pairs)
    assert all(a.config["model"] == b.config["model"] and a.config["recipe"] == b.config["recipe"] for a, b in train)
    assert all("CIFAR-10 (JPEG q75)" in data_label(b.config) and "JPEG" not in data_label(a.config) for a, b in train)


@pytest.fixture
def offline(monkeypatch):
    def refuse(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def test_offline_download_is_one_line_naming_the_archive_and_where_it_goes(dirs, capsys, offline):
    args = [a for a in fast_args(dirs["pid"]) if not a.startswith("data")] + ["data=cifar10", "data.download=true"]
    err = one_line_error(capsys, main(["reproduce", *args]))
    assert "cannot download cifar10" in err and "Temporary failure in name resolution" in err
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in err and str(dirs["data"]) in err
    assert not list(dirs["results"].rglob("records/*.json"))


@pytest.mark.parametrize("data,expected", [
    ("cifar10", ["data.download=true", "cifar-10-python.tar.gz", "cifar-10-batches-py"]),
    ("cifar100", ["data.download=true", "cifar-100-python.tar.gz"]),
    ("cifar10_jpeg", ["not downloadable", "data=cifar10 data.download=true"]),
])
def test_missing_data_says_where_to_get_it(dirs, capsys, monkeypatch, data, expected):
    monkeypatch.setenv("REPRO_DATA_DIR", str(dirs["data"] / "nowhere"))
    args = [a for a in fast_args(dirs["pid"]) if not a.startswith("data")] + [f"data={data}"]
    err = one_line_error(capsys, main(["reproduce", *args]))
    assert all(e in err for e in expected), err


def test_a_rebuild_with_every_record_needs_no_data(dirs, capsys, monkeypatch):
    _jpeg_dataset(dirs["data"])
    args = _jpeg_args(dirs["pid"])
    assert main(["reproduce", *args]) == 0
    shutil.rmtree(dirs["data"] / "cifar10-jpeg")
    before = snapshot(dirs["results"])
    capsys.readouterr()
    assert main(["reproduce", *args]) == 0
    out = capsys.readouterr().out
    assert out.count("(finished)") == 3 and " run " not in out and snapshot(dirs["results"]) == before
    assert "dataset cifar10_jpeg not found" in one_line_error(capsys, main(["reproduce", *args, "seeds=2"]))  # new runs


@pytest.mark.slow
def test_a_fresh_clone_with_no_data_rebuilds_the_committed_report(tmp_path, monkeypatch, capfd):
    """`REPRO_DATA_DIR=/nonexistent python -m repro reproduce paper=respostln scale=cpu tables=[...]` on a
    copy of the committed records: every run skipped, exit 0, and the report is the committed one. (The
    tables are respostln's probe tables, whose records are always complete; training campaigns are rebuilt
    across sessions, and a table still missing records rightly asks for the data.)"""
    paper, results = "respostln", tmp_path / "results"
    for scale_dir in (REPO / "results" / paper).glob("*/records"):  # a clone's records and plans
        shutil.copytree(scale_dir, results / paper / scale_dir.parent.name / "records")
        shutil.copy(scale_dir.parent / "plan.json", results / paper / scale_dir.parent.name / "plan.json")
    for key, value in (("RESULTS", results), ("CACHE", tmp_path / "cache"), ("DATA", tmp_path / "nonexistent")):
        monkeypatch.setenv(f"REPRO_{key}_DIR", str(value))
    assert main(["reproduce", f"paper={paper}", "scale=cpu", "tables=[table1,lemma1,theorem4]"]) == 0
    out = capfd.readouterr().out
    assert re.search(r"\b0 of [1-9]\d* group\(s\) of runs to do", out), out
    assert not (tmp_path / "cache" / "runs").exists()
    assert (results / paper / "REPORT.md").read_text() == (REPO / "results" / paper / "REPORT.md").read_text()
    committed = list((REPO / "results" / paper).glob("*/records/*.json"))
    assert len(records.load_records(paper, root=results)[0]) == len(committed)
