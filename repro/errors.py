"""The one error type for bad input, shared by every stage (plan, run, report) without importing any."""


class ConfigError(ValueError):
    """Bad input from the user (paper, scale, table, model, config value): one line, exit code 2."""


def one_line(e: BaseException) -> str:
    """An error as the one line a command prints (its type's name when it says nothing)."""
    return " ".join(str(e).split()) or type(e).__name__
