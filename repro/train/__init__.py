"""Training: the DeiT recipe from timm parts, the loop, checkpoints, DDP, and running RunSpecs."""
from .checkpoint import CheckpointError
from .engine import Result, Runtime, evaluate, train
from .execute import execute, record_status

__all__ = ["CheckpointError", "Result", "Runtime", "evaluate", "train", "execute", "record_status"]
