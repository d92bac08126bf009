"""The plan stage: papers/<id>/ + scale -> results/<id>/<scale>/plan.json.

``experiments`` is the one door to paper code; ``build`` resolves every run's config and id and names
what each run depends on; ``store`` writes and reads plan.json (stdlib only, so the report can read a
plan without importing what builds one).
"""
