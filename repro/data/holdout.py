"""A pilot split held out of a training set, so that a protocol is chosen without the test set.

    python -m repro.data.holdout <ImageFolder root> <out dir> [--per-class 500]

links the last ``per-class`` images of each class of ``<root>/train`` into ``<out>/val/<class>/`` and the rest
into ``<out>/train/<class>/`` (same input, same split); train on it with ``data=folder data.path=<out>
data.test_split=val``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .sources import IMG_EXTENSIONS


def holdout(root: Path, out: Path, per_class: int = 500) -> dict[str, tuple[int, int]]:
    """Link the split; returns class -> (train images, val images)."""
    train = Path(root) / "train"
    classes = sorted(p.name for p in train.iterdir() if p.is_dir()) if train.is_dir() else []
    if not classes:
        raise ValueError(f"{train}: no class folders; expected <root>/train/<class>/*.jpg")
    counts = {}
    for cls in classes:
        files = sorted(f for f in (train / cls).iterdir() if f.suffix.lower() in IMG_EXTENSIONS)
        if len(files) <= per_class:
            raise ValueError(f"{train / cls}: {len(files)} images, not more than --per-class {per_class}")
        for split, part in (("train", files[:-per_class]), ("val", files[-per_class:])):
            folder = Path(out) / split / cls
            folder.mkdir(parents=True, exist_ok=True)
            for f in part:
                link = folder / f.name
                if not link.is_symlink():
                    link.symlink_to(f.resolve())
        counts[cls] = (len(files) - per_class, per_class)
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="ImageFolder root holding train/<class>/")
    ap.add_argument("out", type=Path, help="where train/ and val/ of links are written")
    ap.add_argument("--per-class", type=int, default=500, help="images per class held out as val (default 500)")
    args = ap.parse_args(argv)
    try:
        counts = holdout(args.root, args.out, args.per_class)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    train, val = sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values())
    print(f"{args.out}: {len(counts)} classes, {train} train / {val} val images (links to {args.root / 'train'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
