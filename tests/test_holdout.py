"""The pilot split: held out of the training set only, the same on a rerun, one-line errors."""
from __future__ import annotations

from pathlib import Path

from PIL import Image

from repro.data.holdout import holdout, main


def _folder(root: Path, per_class: dict) -> None:
    for split in ("train", "test"):
        for cls, n in per_class.items():
            (root / split / cls).mkdir(parents=True)
            for i in range(n):
                Image.new("RGB", (4, 4)).save(root / split / cls / f"{i:04d}.jpg")


def test_the_last_images_of_each_class_are_held_out_and_the_test_split_is_never_read(tmp_path):
    _folder(tmp_path / "data", {"cat": 5, "dog": 4})
    counts = holdout(tmp_path / "data", tmp_path / "pilot", per_class=2)
    assert counts == {"cat": (3, 2), "dog": (2, 2)}
    val = sorted(p.name for p in (tmp_path / "pilot" / "val" / "cat").iterdir())
    assert val == ["0003.jpg", "0004.jpg"]
    targets = {p.resolve() for p in (tmp_path / "pilot").rglob("*.jpg")}
    assert all(t.parent.parent.name == "train" for t in targets) and len(targets) == 9
    assert holdout(tmp_path / "data", tmp_path / "pilot", per_class=2) == counts  # a rerun: same split


def test_too_few_images_is_one_line_with_exit_2(tmp_path, capsys):
    _folder(tmp_path / "data", {"cat": 2})
    assert main([str(tmp_path / "data"), str(tmp_path / "pilot"), "--per-class", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not more than --per-class 2" in err[0]
