"""Errors caused by input or environment, not by bugs: every layer raises them; the CLI prints
their message on one line and exits with `exit_code`."""


class ForesightError(Exception):
    """An error caused by input or environment, not by a bug. Its message is one line."""

    exit_code = 2


class SourceUnavailable(ForesightError):
    """The metric source (Prometheus, Thanos, Mimir) cannot be reached or refused us."""


class MetricMissing(ForesightError):
    """A metric the caller asked for has no series in the requested window."""
