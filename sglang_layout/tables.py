"""Plain-text and Markdown tables: the one helper every report in the project prints with."""

from __future__ import annotations

from collections.abc import Sequence


def number(value: float | None, digits: int = 1) -> str:
    """A figure with thousands separators, or '-' when there is none."""
    return "-" if value is None else f"{value:,.{digits}f}"


def text_table(header: Sequence[str], rows: Sequence[Sequence[object]], *, right_aligned: bool = False) -> str:
    """Columns padded to their widest cell, a dashed rule under the header, trailing spaces trimmed."""
    cells = [[str(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def line(row: list[str]) -> str:
        padded = (cell.rjust(width) if right_aligned else cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        return "  ".join(padded).rstrip()

    lines = [line(row) for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
