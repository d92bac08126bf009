"""Bad values are one line and exit 2, before anything is written: numbers that are not finite, path variables
set but empty, images that cannot be read, folders that are files, a data cache that is not the dataset's.
On commit b6512bc each one trained (some to a wrong result, exit 0) or ended in a traceback."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from PIL import Image

from repro import records
from repro.cli import main
from repro.data import tensor_cache
from repro.data.sources import Split
from repro.errors import ConfigError
from repro.report.__main__ import main as report_main

from conftest import REPO, fast_args, image_folder
from test_cli import one_line_error


def _jpeg_args(pid, *extra):
    args = [a for a in fast_args(pid) if not a.startswith("data")]
    return [*args, "data=cifar10_jpeg", "data.max_per_class=4", "data.test_max_per_class=4", "tables=[table2]", *extra]


def _nothing_written(dirs) -> bool:
    return not (dirs["cache"] / "runs").exists() and not list(dirs["results"].rglob("*.json"))


@pytest.mark.parametrize("value", ["recipe.lr=nan", "recipe.lr=inf", "recipe.warmup_lr=inf"])
def test_a_number_that_is_not_finite_is_one_line_and_nothing_is_written(dirs, capsys, value):
    """recipe.lr=nan trained 10 failed runs (291 lines of tracebacks); recipe.lr=inf 10 "diverged" ones, exit 0."""
    err = one_line_error(capsys, main(["reproduce", *fast_args(dirs["pid"], value)]))
    assert f"{value}: not a finite number" in err and _nothing_written(dirs)


@pytest.mark.parametrize("var", ["REPRO_RESULTS_DIR", "REPRO_CACHE_DIR", "REPRO_DATA_DIR"])
def test_a_path_variable_set_but_empty_is_one_line_not_the_current_folder(dirs, capsys, monkeypatch, tmp_path, var):
    image_folder(dirs["data"] / "cifar10-jpeg")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv(var, "")
    err = one_line_error(capsys, main(["reproduce", *_jpeg_args(dirs["pid"])]))
    assert f"{var} is set but empty" in err and not list(cwd.iterdir()) and _nothing_written(dirs)
    if var == "REPRO_RESULTS_DIR":
        assert "set but empty" in one_line_error(capsys, report_main(["--papers-dir", str(REPO / "papers")]))


def _bmp(path, value: int) -> None:
    Image.fromarray(np.full((8, 8, 3), value, dtype=np.uint8)).save(path)  # BMP: the same size whatever the pixels


def test_changed_pixels_of_the_same_size_rebuild_the_data_cache(dirs):
    """The cache was keyed by path and size: an image replaced by another of the same size trained on the old one."""
    files = [dirs["data"] / f"{i}.bmp" for i in range(2)]
    for i, f in enumerate(files):
        _bmp(f, 10 * i)
    split = Split(name="bmp/train", labels=[0, 1], classes=["a", "b"], files=files)
    assert tensor_cache.decoded(split)[0][1].unique().tolist() == [10]
    size = files[1].stat().st_size
    _bmp(files[1], 200)
    assert files[1].stat().st_size == size
    tensor_cache._memo.clear()  # a new process
    assert tensor_cache.decoded(split)[0][1].unique().tolist() == [200]


@pytest.mark.parametrize("case", ["decompression bomb", "dangling symlink"])
def test_an_image_that_cannot_be_read_is_one_line_before_training(dirs, capsys, monkeypatch, case):
    image_folder(dirs["data"] / "cifar10-jpeg")
    image = dirs["data"] / "cifar10-jpeg" / "train" / "dog" / "0001.jpg"
    if case == "decompression bomb":  # over twice PIL's limit, as 15000 x 15000 is at its default one
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 32 * 32)
        Image.new("RGB", (64, 64)).save(image)
    else:
        image.unlink()
        image.symlink_to(dirs["data"] / "gone.jpg")
    err = one_line_error(capsys, main(["reproduce", *_jpeg_args(dirs["pid"])]))
    assert str(image) in err and "replace or delete the file" in err and _nothing_written(dirs)


@pytest.mark.parametrize("blocked", ["<scale>", "records", "locks", "<cache>/runs"])
def test_a_records_folder_that_is_a_file_is_one_line_before_training(dirs, capsys, blocked):
    """The run trained, then failed to write its record (a traceback); a file at locks/ was a traceback, one at
    <cache>/runs a 'failed' record per run."""
    scale = dirs["results"] / dirs["pid"] / "tiny"
    blocker = {"<scale>": scale, "records": scale / "records", "locks": scale / "locks",
               "<cache>/runs": dirs["cache"] / "runs"}[blocked]
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("x")
    err = one_line_error(capsys, main(["reproduce", *fast_args(dirs["pid"])]))
    assert f"{blocker} is a file, not a folder" in err and not list(dirs["results"].rglob("*.json"))
    assert blocked == "<cache>/runs" or not (dirs["cache"] / "runs").exists()


def test_a_data_cache_of_the_wrong_size_is_one_line(dirs, capsys):
    image_folder(dirs["data"] / "cifar10-jpeg")
    assert main(["reproduce", *_jpeg_args(dirs["pid"], "seeds=1")]) == 0
    cache = sorted((dirs["cache"] / "data").glob("*.pt"))[0]
    torch.save({"images": torch.zeros(3, 3, 32, 32, dtype=torch.uint8)}, cache)
    tensor_cache._memo.clear()
    capsys.readouterr()
    err = one_line_error(capsys, main(["reproduce", *_jpeg_args(dirs["pid"], "seeds=2")]))
    assert f"data cache {cache} is unreadable" in err and "not 40 RGB images" in err and f"rm {cache}" in err
    assert len(list(dirs["results"].rglob("records/*.json"))) == 2  # seeds=1's, kept
    assert os.path.exists(cache)
    assert records.load_records(dirs["pid"], root=dirs["results"])[1] == []


def test_out_of_memory_is_one_line_and_no_failed_record(dirs, capsys, monkeypatch):
    """Every later run would fail the same way: it printed a traceback per run and recorded each as failed."""
    from repro.run import sequential

    def oom(spec, rt, **_):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(sequential, "execute", oom)
    err = one_line_error(capsys, main(["reproduce", *fast_args(dirs["pid"], "tables=[table2]", "report=false")]))
    assert "out of memory (CUDA out of memory. Tried to allocate 20.00 GiB); lower recipe.batch_size" in err
    assert not list(dirs["results"].rglob("records/*.json"))


@pytest.mark.parametrize("blocked", ["<cache>/data", "<cache>/deadline", "plan.json"])
def test_a_cache_folder_that_is_a_file_or_a_plan_that_is_a_folder_is_one_line(dirs, capsys, blocked):
    """Each was a traceback: the data cache's and deadline's folders created on first write, plan.json read and
    written as a file."""
    image_folder(dirs["data"] / "cifar10-jpeg")
    command = ["deadline", "25m", "reproduce"] if blocked == "<cache>/deadline" else ["reproduce"]
    if blocked == "plan.json":
        blocker = dirs["results"] / dirs["pid"] / "tiny" / "plan.json"
        blocker.mkdir(parents=True)
        said = f"{blocker} is a folder, not a plan: move it away"
    else:
        blocker = dirs["cache"] / blocked.removeprefix("<cache>/")
        blocker.write_text("x")
        said = f"{blocker} is a file, not a folder: move it away"
    err = one_line_error(capsys, main([*command, *_jpeg_args(dirs["pid"])]))
    assert said in err and blocker.exists() and not (dirs["cache"] / "runs").exists()
    assert not [f for f in dirs["results"].rglob("*") if f.is_file()]


@pytest.mark.parametrize("case", ["a file on its folder's path", "a folder at its path"])
def test_any_atomic_write_blocked_by_a_file_or_folder_is_one_line(tmp_path, case):
    """The net under every write (records, plans, reports, caches): a ConfigError naming what stands there."""
    target = tmp_path / "a" / "b.json"
    if case == "a folder at its path":
        target.mkdir(parents=True)
    else:
        (tmp_path / "a").write_text("x")
    with pytest.raises(ConfigError, match=f"cannot write {target}: .*move it away"):
        records.atomic_write_bytes(target, b"{}")
    assert [p.name for p in tmp_path.rglob("*")] in (["a"], ["a", "b.json"])
