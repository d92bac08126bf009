"""The plan stage: papers/<id>/ + scale -> results/<id>/<scale>/plan.json (``experiments``: the one door to paper
code; ``build``: every run's config, id and dependencies; ``store``: plan.json, stdlib only, for the report)."""
