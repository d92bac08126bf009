"""Measurements on trained models: speed, attention and feature statistics, theorem checks (size and cost:
repro/models/cost.py)."""
