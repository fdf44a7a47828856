"""SGLang's own verdict on launch commands, asked of the installed SGLang without loading a model.

Run on the box by the venv's Python, as the service user, in a transient unit with the layout's sandbox
(the sglang_args_verdict module sends this file on stdin):

    python - CANDIDATES_JSON        CANDIDATES_JSON: [{"name": ..., "args": [...], "env": {...}}, ...]

For each candidate it does what `python -m sglang.launch_server ARGS` does before any weight is read:
`prepare_server_args(args)` (argparse, --config), `resolve_once()` (the resolution hooks, which refuse
or rewrite arguments) and `check_server_args()`; all candidates in this one process, one import. It
prints one JSON document on stdout: for each candidate accepted or refused (SGLang's exception type,
text and the line that raised it) and what resolution decided ("what SGLang will really run"), with
SGLang's warnings. Nothing here uses the GPU; whether CUDA was initialised by SGLang's checks is said.

It runs under the installed SGLang's Python, not the project's: standard library only.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import resource
import sys
import time
import traceback

MAX_TEXT = 2000
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Warnings(logging.Handler):
    """SGLang's log records at WARNING and above while one candidate is judged (its own words)."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(ANSI.sub("", record.getMessage())[:MAX_TEXT])


def _plain(value: object) -> object:
    """A resolved value as JSON can carry it (SGLang's config objects as their text)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return list(value)
    return str(value)[:MAX_TEXT]


# Fields SGLang fills differently on every parse of the same command (a random seed when none is given).
VOLATILE_FIELDS = ("random_seed",)


def _fingerprint(server_args: object) -> str:
    """The server SGLang will run, as one digest: every field after resolution (decisions applied, bookkeeping and
    volatile fields left out). Two commands with the same digest start the same server."""
    kind = type(server_args)
    # 0.5.23's ServerArgs is a msgspec.Struct (its fields are not in vars()); a dataclass or plain object else.
    names = getattr(kind, "__struct_fields__", None) or getattr(kind, "__dataclass_fields__", None) or vars(server_args)
    fields = {k: getattr(server_args, k, None) for k in names if not k.startswith("_") and k not in VOLATILE_FIELDS}
    for _, decided in getattr(server_args, "_resolved_overrides", None) or ():
        fields.update({k: v for k, v in decided.items() if not k.startswith("_") and k not in VOLATILE_FIELDS})
    text = json.dumps({k: _plain(v) for k, v in fields.items()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _where(exc: BaseException) -> str:
    """The innermost frame inside SGLang that raised: path below the package, line number and source line."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f"{os.sep}sglang{os.sep}" in f.filename]
    if not frames:
        return ""
    frame = frames[-1]
    path = frame.filename[frame.filename.rfind(f"{os.sep}sglang{os.sep}") + 1 :]
    return f"{path}:{frame.lineno}: {(frame.line or '').strip()}"


def _refusal(exc: BaseException, stderr: str) -> dict[str, str]:
    if isinstance(exc, SystemExit):  # argparse: usage and "error: ..." on stderr, exit 2
        errors = [line for line in stderr.splitlines() if ": error: " in line]
        message = errors[-1].split(": error: ", 1)[1] if errors else (stderr.strip().splitlines() or [f"exit {exc.code}"])[-1]
        return {"type": "argparse", "message": message[:MAX_TEXT], "where": ""}
    where = _where(exc)
    message = str(exc).strip() or (where.split(": ", 1)[1] if ": " in where else "")
    return {"type": type(exc).__name__, "message": message[:MAX_TEXT], "where": where}


def _resolved(server_args: object, baseline: object) -> list[dict[str, object]]:
    """Each field resolution decided, last writer winning, where it differs from the field as parsed.

    `declared` says whether the command set the field (it differs from a command naming only the model: a
    rewrite) or left it to SGLang (a choice); underscored fields are SGLang's bookkeeping and left out.
    """
    final: dict[str, tuple[str, object]] = {}
    for source, fields in getattr(server_args, "_resolved_overrides", None) or ():
        for name, value in fields.items():
            final[name] = (source, value)
    changes = []
    for name, (source, value) in final.items():
        parsed = getattr(server_args, name, None)
        if name.startswith("_") or value == parsed:
            continue
        declared = parsed != getattr(baseline, name, parsed)
        changes.append({"field": name, "parsed": _plain(parsed), "resolved": _plain(value), "by": source, "declared": declared})
    return changes


_BASELINES: dict[tuple[str, ...], object] = {}


def _model_only(prepare: object, args: list[str]) -> object:
    """The command with only its --model-path, parsed once per model: what the fields are when the command says nothing."""
    at = args.index("--model-path") if "--model-path" in args else -1
    model = tuple(args[at : at + 2] if at >= 0 else [])
    if model not in _BASELINES:
        with contextlib.redirect_stderr(io.StringIO()):
            _BASELINES[model] = prepare(list(model))  # type: ignore[operator]
    return _BASELINES[model]


def judge(prepare: object, name: str, args: list[str], env: dict[str, str]) -> dict[str, object]:
    started = time.monotonic()
    saved = dict(os.environ)
    os.environ.update(env)  # SGLang reads its SGLANG_* switches from the environment while resolving
    caught = _Warnings()
    logging.getLogger().addHandler(caught)
    stderr = io.StringIO()
    verdict: dict[str, object] = {"name": name, "accepted": False, "refusal": None, "resolved": []}
    try:
        with contextlib.redirect_stderr(stderr):
            server_args = prepare(args)  # type: ignore[operator]
            logging.getLogger().addHandler(caught)  # prepare_server_args resets the root logger's handlers
            server_args.resolve_once()
            server_args.check_server_args()
        verdict.update(
            accepted=True, resolved=_resolved(server_args, _model_only(prepare, args)), fingerprint=_fingerprint(server_args)
        )
    except (Exception, SystemExit) as exc:
        verdict["refusal"] = _refusal(exc, stderr.getvalue())
    finally:
        logging.getLogger().removeHandler(caught)
        os.environ.clear()
        os.environ.update(saved)
    verdict.update(warnings=caught.lines[:50], seconds=round(time.monotonic() - started, 3))
    return verdict


def main(argv: list[str]) -> int:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # SGLang's own prints go to stderr; stdout carries the one JSON document
    candidates = json.loads(argv[1])
    started = time.monotonic()
    report: dict[str, object] = {"candidates": []}
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            from sglang.srt.server_args import prepare_server_args
        import sglang
    except Exception as exc:
        report["import_error"] = f"{type(exc).__name__}: {exc}"[:MAX_TEXT]
        out.write(json.dumps(report))
        return 0
    report.update(sglang_version=getattr(sglang, "__version__", ""), import_s=round(time.monotonic() - started, 3))
    report["candidates"] = [judge(prepare_server_args, c["name"], list(c["args"]), dict(c.get("env") or {})) for c in candidates]
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    report["cuda_initialised"] = bool(cuda is not None and cuda.is_initialized())
    report["max_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    report["total_s"] = round(time.monotonic() - started, 3)
    out.write(json.dumps(report))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
