"""Measurements on models (CMHSA theorem checks, and more to come from the lead)."""
