"""Tables on the terminal that stay one line per row in log files too."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table


def new_table(title: str, left: list[str], right: list[str]) -> Table:
    """A compact table whose cells never wrap (a log file keeps one line per trial)."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in left:
        table.add_column(column, no_wrap=True)
    for column in right:
        table.add_column(column, justify="right", no_wrap=True)
    return table


def print_table(console: Console, table: Table) -> None:
    """Off a terminal (a log file, a pipe) rich assumes 80 columns: give the table its own width."""
    if console.quiet:
        return
    if not console.is_terminal:
        console = Console(file=console.file, width=400, no_color=console.no_color)
    console.print(table, highlight=False)
