"""Prompts from a local dataset file (`--dataset`): read, checked and written in the one form Locust reads.

Two forms are read, never downloaded:
- ShareGPT JSON: a list of {"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]};
  each conversation's first human turn is a prompt (its output length is --output-tokens: without
  the model's tokenizer the reply's token count is unknown);
- JSON lines: {"prompt": "...", "output_len": 128} per line, output_len optional.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_BYTES = 2 * 1024**3  # a ShareGPT dump is ~650 MB
MAX_OUTPUT_LEN = 1_000_000


class DatasetError(ValueError):
    """A dataset file that cannot be used, said with the file, the place and the fix."""


@dataclass(frozen=True)
class Prompt:
    text: str
    output_len: int | None = None  # None: --output-tokens


def load_prompts(path: Path) -> list[Prompt]:
    """Every usable prompt of the file, in file order; DatasetError when there is none or the file is malformed."""
    where = f"--dataset {path}"
    try:
        # Opened without blocking and checked before reading: a FIFO would wait for a writer and a device
        # (/dev/zero) would never end; the read is bounded too, in case the file grows meanwhile.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise DatasetError(f"{where}: not a regular file; give a local ShareGPT JSON or a JSON-lines file")
        with open(descriptor, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise DatasetError(f"{where}: larger than {MAX_BYTES // 1024**3} GiB; take a sample of it")
        text = data.decode("utf-8")
    except FileNotFoundError as exc:
        raise DatasetError(f"{where}: no such file; give a local ShareGPT JSON or a JSON-lines file") from exc
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{where}: not UTF-8 text") from exc
    except OSError as exc:
        raise DatasetError(f"{where}: cannot be read ({exc.strerror or exc})") from exc
    stripped = text.lstrip()
    prompts = _sharegpt(where, text) if stripped.startswith("[") else _json_lines(where, text)
    if not prompts:
        raise DatasetError(f"{where}: no usable prompt in it (ShareGPT: a first human turn; JSON lines: a 'prompt')")
    return prompts


def _sharegpt(where: str, text: str) -> list[Prompt]:
    try:
        items = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise DatasetError(f"{where}: not valid JSON ({exc})") from exc
    prompts = []
    for item in items:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            continue
        first = next((t for t in turns if isinstance(t, dict) and t.get("from") in ("human", "user")), None)
        value = first.get("value") if first else None
        if isinstance(value, str) and value.strip():
            prompts.append(Prompt(value))
    return prompts


def _json_lines(where: str, text: str) -> list[Prompt]:
    prompts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where} line {number}: not a JSON object ({exc.msg})") from exc
        if not isinstance(item, dict):
            raise DatasetError(f'{where} line {number}: write one object per line, e.g. {{"prompt": "..."}}')
        prompt, output_len = item.get("prompt"), item.get("output_len")
        if not isinstance(prompt, str) or not prompt.strip():
            raise DatasetError(f"{where} line {number}: 'prompt' must be non-empty text")
        valid_len = isinstance(output_len, int) and not isinstance(output_len, bool) and 1 <= output_len <= MAX_OUTPUT_LEN
        if output_len is not None and not valid_len:
            raise DatasetError(
                f"{where} line {number}: 'output_len' {output_len!r} must be a whole number from 1 to {MAX_OUTPUT_LEN}"
            )
        prompts.append(Prompt(prompt, output_len))
    return prompts


def write_prompts(prompts: list[Prompt], path: Path) -> Path:
    """The prompts as JSON lines {"prompt", "output_len"}: what the locustfile reads (--bench-prompts)."""
    with path.open("w", encoding="utf-8") as out:
        for prompt in prompts:
            out.write(json.dumps({"prompt": prompt.text, "output_len": prompt.output_len}) + "\n")
    return path
