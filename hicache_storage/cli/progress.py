"""The progress bar every long-running command shows: description, bar, done/total, elapsed time."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["progress_bar"]


def progress_bar(console: Console, *, disable: bool = False) -> Progress:
    """A transient bar on ``console`` (gone once the command prints its results); ``disable`` hides it."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=disable,
    )
