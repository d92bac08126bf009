"""Running campaigns: under a deadline (deadline.py)."""
