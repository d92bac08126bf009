"""The one error type for bad input, shared by every stage (plan, run, report) without importing any."""


class ConfigError(ValueError):
    """Bad input from the user (paper, scale, table, model, config value): one line, exit code 2."""
