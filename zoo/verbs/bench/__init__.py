"""`python -m zoo bench`: the plan (combinations), one worker process per combination, and the report."""

from zoo.verbs.bench.plan import main

__all__ = ["main"]
