"""How many images a probe reads: the protocol's count in a real run, one training batch of the run in a
smoke or dry run (``config["mode"]``), which checks the probe's path and exists to be cheap (64 images
through a 224 px model's analysis cost a CPU core a minute or more)."""
from __future__ import annotations


def probe_images(config: dict, images: int) -> int:
    """``images`` for a real run; at most the recipe's batch size (a dry run's: 2) for a smoke or dry run."""
    return min(int(images), int(config["recipe"]["batch_size"])) if config.get("mode") else int(images)
