"""Aug-ViT's diversity precondition read off DeiT models that other runs trained (a pilot, not a record).

    python -m papers.augvit.pilot_diversity <record.json> [<record.json> ...]

For each finished training record, loads its final checkpoint from ``REPRO_CACHE_DIR`` (the run's
``last.pt``) and prints, on 64 images of the run's own evaluation split (for a pilot, the held-out split),
r(Z_l)/r(Z_0) and r(Z_l)/||Z_l||_F at every block (``repro.probes.diversity.diversity_curve``) and the last block's
patch CosSim. It answers "does the identity-shortcut baseline lose diversity at this depth and token
count?" (precondition ``pre_deit_loses_diversity``) from models already trained, without a run of its own.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from repro.data import build_data
from repro.probes.diversity import diversity_curve, layerwise, patch_cosine_similarity
from repro.runs import cache_root
from repro.train import checkpoint
from repro.train.model import create_model

IMAGES = 64


def read(record_path: Path) -> dict:
    record = json.loads(Path(record_path).read_text())
    config, prov = record["config"], record["provenance"]
    ckpt = cache_root() / "runs" / record["paper"] / record["scale"] / record["run_id"] / "last.pt"
    state = checkpoint.load(ckpt, prov["fingerprint"])
    if state is None:
        raise FileNotFoundError(f"{ckpt}: no checkpoint; point REPRO_CACHE_DIR at the cache the run trained in")
    data = build_data(config["data"], {**config["recipe"], "batch_size": 1}, seed=0, device=torch.device("cpu"))
    model = create_model(config, data.num_classes)
    model.load_state_dict(state["model"])
    model.eval()
    images, _ = data.test.sample(IMAGES)
    curve = diversity_curve(model, images)
    cossim = layerwise(model, images, patch_cosine_similarity)
    kw = config["model"].get("kwargs", {})
    return {"run_id": record["run_id"], "depth": kw.get("depth"), "patch_size": kw.get("patch_size"),
            "top1": record["metrics"].get("top1"), "eval_split": prov["data"]["test"],
            "eval_images": prov["data"]["test_images"], "ratio_last": curve["ratio"][-1],
            "ratio_min": min(curve["ratio"][1:]), "relative_first": curve["relative"][0],
            "relative_last": curve["relative"][-1], "cossim_last": cossim[-1]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", type=Path, nargs="+", help="finished training records (JSON)")
    args = ap.parse_args(argv)
    try:
        for path in args.records:
            print(json.dumps(read(path)))
    except (OSError, KeyError, checkpoint.CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
