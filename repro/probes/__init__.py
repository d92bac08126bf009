"""Measurements on models: size and cost, speed, attention and feature statistics, theorem checks."""
