"""Speculative decoding's draft models, declared once and named by layouts (`draft: NAME`) and search grids.

    sglang_draft_models:
      <name matching [a-z0-9][a-z0-9-]*>:
        path: /srv/models/Kimi-K2.6-EAGLE3     # where the draft's files are on the GPU host
        algorithm: EAGLE3                      # --speculative-algorithm
        args: {speculative-num-steps: 3, speculative-eagle-topk: 1, speculative-num-draft-tokens: 4}
        source: controller                     # how provision.yml fetches it: none, controller, host, huggingface
        controller_path: /data/eagle3          # (and source_host, source_path, hf_repo, hf_revision: as sglang_model_*)

A layout that names a draft runs with `--speculative-algorithm`, `--speculative-draft-model-path` and the
draft's args under its own (the layout's args win, but not over the two the draft sets). The
sglang_model role fetches each draft as it fetches the model; the service role refuses a layout whose
draft is not on the host or not readable by the service user before anything stops.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sglang_layout import text

DRAFT_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
ALGORITHM = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
SOURCES = ("none", "controller", "host", "huggingface")
DRAFT_KEYS = frozenset(
    ("path", "algorithm", "args", "source", "controller_path", "source_host", "source_path", "hf_repo", "hf_revision")
)
# The two flags a draft sets itself (the canonical names; aliases resolve to them).
DRAFT_FLAGS = ("speculative-algorithm", "speculative-draft-model-path")


@dataclass(frozen=True)
class Draft:
    name: str
    path: str
    algorithm: str
    args: dict[str, Any] = field(default_factory=dict)  # checked as layout args are, by the layout that names it
    source: str = "none"

    def flags(self) -> dict[str, Any]:
        return {"speculative-algorithm": self.algorithm, "speculative-draft-model-path": self.path}


def parse_drafts(raw: Any) -> dict[str, Draft]:
    """Validate `sglang_draft_models` (absent or empty: no drafts)."""
    if raw in (None, {}):
        return {}
    if not isinstance(raw, Mapping):
        raise text.refuse("sglang_draft_models", raw, "must be a mapping of draft name to draft", "see sglang_layout/drafts.py")
    drafts = {}
    for name, spec in raw.items():
        here = f"sglang_draft_models.{name}"
        text.matching(here, name, DRAFT_NAME, max_length=48, what="a draft name of [a-z0-9-]", fix="rename it, e.g. eagle3")
        if not isinstance(spec, Mapping):
            raise text.refuse(here, spec, "a draft must be a mapping", "write e.g. {path: /srv/models/draft, algorithm: EAGLE3}")
        unknown = sorted((key for key in spec if key not in DRAFT_KEYS), key=str)
        if unknown:
            raise text.refuse(
                f"{here}.{unknown[0]}", spec[unknown[0]], "is not a draft field", f"use only {', '.join(sorted(DRAFT_KEYS))}"
            )
        path = text.absolute_path(f"{here}.path", spec.get("path"), example="/srv/models/Kimi-K2.6-EAGLE3")
        algorithm = text.matching(
            f"{here}.algorithm",
            spec.get("algorithm"),
            ALGORITHM,
            max_length=32,
            what="SGLang's --speculative-algorithm, e.g. EAGLE3, EAGLE, NEXTN or STANDALONE",
            fix="write e.g. algorithm: EAGLE3",
        )
        source = spec.get("source", "none")
        if source not in SOURCES:
            raise text.refuse(f"{here}.source", source, "is not a source", f"use one of {', '.join(SOURCES)}")
        args = spec.get("args") or {}
        if not isinstance(args, Mapping):
            raise text.refuse(f"{here}.args", args, "must be a mapping of flag to value", "write e.g. {speculative-num-steps: 3}")
        drafts[name] = Draft(name=name, path=path, algorithm=algorithm, args=dict(args), source=source)
    return drafts
