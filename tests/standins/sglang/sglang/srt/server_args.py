"""STAND-IN for sglang.srt.server_args (rehearsal tests only): the entry points SGLang 0.5.23's launcher
calls before any weight is read, `prepare_server_args(argv)`, `ServerArgs.resolve_once()` and
`ServerArgs.check_server_args()`, with a handful of the real rules and rewrites, in the real words.

Each rule below names the hook and line of sglang 0.5.23 it imitates. Resolution records its decisions
as the real one does, in `_resolved_overrides` ([(source, {field: value})]), and leaves the parsed fields
as they were; warnings go to the `sglang` loggers.
"""

from __future__ import annotations

import logging
from typing import Any

from sglang.cli_args import build_parser, with_config_file

log = logging.getLogger("sglang.srt.arg_groups")

SPECULATIVE_EAGLE = ("EAGLE", "EAGLE3", "NEXTN")


class ServerArgs:
    """The parsed command (argparse's names as attributes) and what resolution decided about it."""

    def __init__(self, parsed: dict[str, Any]) -> None:
        self.__dict__.update(parsed)
        self._resolved_overrides: list[tuple[str, dict[str, Any]]] = []

    def _declare(self, source: str, **fields: Any) -> None:
        self._resolved_overrides.append((source, fields))

    def _value(self, name: str) -> Any:
        for _, fields in reversed(self._resolved_overrides):
            if name in fields:
                return fields[name]
        return getattr(self, name, None)

    def resolve_once(self) -> None:
        attn_dp = int(self._value("attn_dp_size") or 1)
        dp = int(self._value("dp_size") or 1)
        if attn_dp < 1:  # parallel_hook.py:286
            raise ValueError(f"--attn-dp-size must be positive (got {attn_dp}).")
        if attn_dp > 1 and dp > 1:  # parallel_hook.py:288
            raise ValueError(
                f"--dp-size {dp} with --attn-dp-size {attn_dp}: data-parallel replicas combined with attention "
                "data parallelism are not supported."
            )
        if self._value("dcp_replicate_q_proj") and int(self._value("dcp_size") or 1) <= 1:  # parallel_hook.py:267
            raise ValueError("--dcp-replicate-q-proj requires --dcp-size > 1.")
        if self._value("moe_a2a_backend") not in (None, "none"):  # overrides.py:1611 _a2a_ep_size (moe_hook.py:293): ep = tp
            self._declare("_a2a_ep_size", ep_size=int(self._value("tp_size") or 1))
        if self._value("attention_backend") is None:  # overrides.py:1127 _attention_backend_default: chosen when unset
            self._declare("_attention_backend_default", attention_backend="flashinfer")
        algorithm = self._value("speculative_algorithm")
        if self._value("speculative_draft_sink_size") is not None and self._value("speculative_draft_window_size") is None:
            raise ValueError("--speculative-draft-sink-size requires --speculative-draft-window-size.")  # speculative_hook.py:228
        if algorithm in SPECULATIVE_EAGLE and self._value("max_running_requests") is None:  # speculative_hook.py:1086-1093
            self._declare("_handle_eagle_family", max_running_requests=48)
            log.warning(
                "Max running requests is reset to 48 for speculative decoding. "
                "You can override this by explicitly setting --max-running-requests."
            )

    def check_server_args(self) -> None:
        if self._value("enable_hierarchical_cache") and self._value("disable_radix_cache"):  # kv_cache_hook.py:394
            raise ValueError(
                "The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive and cannot be "
                "used at the same time. Please use only one of them."
            )


# SGLang 0.5.23's own defaults for the flags the rehearsal searches, as this untyped parser holds a value
# given on the command line (text): so `--num-continuous-decode-steps 1` parses to the server that a
# command without it starts, as in the real ServerArgs (its dataclass default is 1).
DEFAULTS = {"num_continuous_decode_steps": "1", "schedule_policy": "fcfs"}


def prepare_server_args(argv: list[str]) -> ServerArgs:
    """argparse over the real flag table (exit 2 on a bad flag, as the real parser), --config merged first."""
    parsed = vars(build_parser().parse_args(with_config_file(list(argv))))
    for name, default in DEFAULTS.items():
        if parsed.get(name) is None:
            parsed[name] = default
        else:
            parsed[name] = str(parsed[name])
    return ServerArgs(parsed)
