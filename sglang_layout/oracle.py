"""SGLang's own verdict beside ours: what to ask the installed SGLang, and how to read its answer.

Our preflight (preflight.py) knows ~15 rules; the installed SGLang checks hundreds of its own while it
resolves arguments, and rewrites some (a backend chosen, a feature switched off). The host runs SGLang's
checks with the sglang_args_verdict module (roles/sglang_service/files/sglang_args_verdict.py does the
asking). Here: the request (each candidate's launch arguments and environment, the sandbox to run in)
and the comparison, pure functions. Where the two disagree both are said; at deploy SGLang's refusal wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sglang_layout import command, diagnosis, hardening
from sglang_layout.schema import Layout

# Fields SGLang resolves on every launch that say nothing about the layout (a fresh random seed each time,
# the model path repeated as tokenizer and served name).
QUIET_FIELDS = frozenset({"random_seed", "tokenizer_path", "served_model_name"})
# Our rules that foresee a failure at model init or at load (no memory for the weights, a division by zero
# building the MoE layers, as TP2 EP4's in the field notes, experts that do not split, too few GPUs): SGLang
# 0.5.23's argument checks load no weights and build no model, so they cannot see it. A layout refused by these
# alone and taken by SGLang's checks is no disagreement: each says what it can see, and the start would fail.
AT_LOAD_RULES = frozenset({"memory", "ep-divides-tp", "moe-tp-width", "experts-divisible", "gpus"})


def refused_at_load(verdict: Mapping[str, Any]) -> bool:
    """Whether our verdict refuses only with rules that foresee a failure at init or load (AT_LOAD_RULES)."""
    errors = [f for f in verdict.get("findings") or [] if f.get("severity") == "error"]
    return bool(errors) and all(f.get("rule") in AT_LOAD_RULES for f in errors)


def agrees(verdict: Mapping[str, Any], accepted: bool) -> bool:
    """Our verdict and SGLang's agree on the outcome: the same, or ours foresees what only a start would show."""
    ours_ok = bool(verdict.get("ok", True))
    return ours_ok == accepted or (accepted and refused_at_load(verdict))


SHOWN_CHARS = 120
WARNINGS_SHOWN = 3


def launch_args(argv: Sequence[str]) -> list[str]:
    """A unit's server arguments as SGLang's check takes them: without --config (the secrets never reach it)."""
    args = list(argv)
    if "--config" in args:
        at = args.index("--config")
        del args[at : at + 2]
    return args


def request(
    layouts: Iterable[Layout],
    argv_by_layout: Mapping[str, Sequence[str]],
    *,
    venv: str,
    python_version: str,
    cuda_home: str,
    base_env: Mapping[str, str] | None,
    gpu_ids: Sequence[int] | None,
    user: str,
    group: str,
    state_dir: str,
    hardening_overrides: Mapping[str, hardening.HardeningValue | None],
) -> dict[str, Any]:
    """What the host is asked: each layout's arguments and environment, and the one sandbox all run in.

    One process judges every candidate (one import): its sandbox is the units' (the common overrides; with a
    single candidate, that layout's own as well) and it sees every GPU of the slice; each candidate's own
    environment is set around its check.
    """
    chosen = list(layouts)
    own = chosen[0].hardening if len(chosen) == 1 else {}
    widest = max(chosen, key=lambda layout: layout.gpus_per_node) if chosen else Layout(name="none")
    process_env = command.service_environment(
        widest, venv=venv, cuda_home=cuda_home, python_version=python_version, base_env=base_env, gpu_ids=gpu_ids
    )
    candidates = [
        {
            "name": layout.name,
            "args": launch_args(argv_by_layout[layout.name]),
            "env": command.service_environment(
                layout, venv=venv, cuda_home=cuda_home, python_version=python_version, base_env=base_env, gpu_ids=gpu_ids
            ),
        }
        for layout in chosen
    ]
    directives = hardening.merged(state_dir, hardening_overrides, own)
    return {
        "python": f"{venv}/bin/python",
        "user": user,
        "group": group,
        "working_directory": state_dir,
        "environment": process_env,
        "properties": [line.replace("%%", "%") for line in hardening.unit_lines(directives)],
        "candidates": candidates,
    }


def shown(value: Any) -> str:
    text = str(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def rewrites(candidate: Mapping[str, Any]) -> list[str]:
    """What SGLang will really run that the command did not say: rewrites of declared flags first."""
    changes = [c for c in candidate.get("resolved") or [] if c["field"] not in QUIET_FIELDS]
    changes.sort(key=lambda change: not change["declared"])
    return [
        f"{'rewrites' if c['declared'] else 'chooses'} {c['field']}: {shown(c['parsed'])} -> {shown(c['resolved'])} ({c['by']})"
        for c in changes
    ]


def refusal_text(refusal: Mapping[str, Any]) -> str:
    where = f" [{refusal['where']}]" if refusal.get("where") and refusal["where"] != refusal["message"] else ""
    kind = "argument error" if refusal["type"] == "argparse" else refusal["type"]
    return f"{kind}: {refusal['message']}{where}"


def compare(ours: Mapping[str, Mapping[str, Any]], report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each judged layout: both verdicts, whether they agree, and SGLang's words (refusal, rewrites, warnings)."""
    result = {}
    for candidate in report.get("candidates") or []:
        name = candidate["name"]
        our_ok = bool(ours.get(name, {}).get("ok", True))
        accepted = bool(candidate["accepted"])
        result[name] = {
            "ours": our_ok,
            "sglang": accepted,
            "agree": agrees(ours.get(name, {}), accepted),
            "at_load": not our_ok and accepted and refused_at_load(ours.get(name, {})),
            "refusal": refusal_text(candidate["refusal"]) if candidate.get("refusal") else "",
            "rewrites": rewrites(candidate),
            "warnings": list(candidate.get("warnings") or []),
            "seconds": candidate.get("seconds"),
        }
    return result


def outcome(result: Mapping[str, Any], skipped: str) -> dict[str, Any]:
    """The module's result -> SGLang's report; or {'failed': why, with systemd's own lines diagnosed} when the
    transient unit gave no verdict (a sandbox systemd cannot set up, a timeout); or {'skipped': why}."""
    if result.get("report") is not None:
        return dict(result["report"])
    if result.get("msg") and not result.get("skipped"):  # the module failed (the task itself is failed_when: false)
        stderr = str(result.get("stderr") or "")
        found = diagnosis.diagnose(stderr)
        if found.cause == "setup":
            return {"failed": found.message(), "sandbox": True}
        return {"failed": str(result.get("msg") or "no answer"), "sandbox": False}
    return {"skipped": skipped}


def lines(ours: Mapping[str, Mapping[str, Any]], report: Mapping[str, Any], rewrites_shown: int = 8) -> list[str]:
    """The side-by-side verdicts for the output: one line per layout, then SGLang's words under it."""
    if report.get("skipped"):
        return [f"SGLang's own checks: not asked ({report['skipped']}); our rules stand alone."]
    if report.get("failed"):
        where = "in the units' sandbox" if report.get("sandbox") else "(no verdict)"
        return [f"SGLang's own checks could not run {where}:", *str(report["failed"]).splitlines()]
    if report.get("import_error"):
        return [f"SGLang's own checks could not run: {report['import_error']}"]
    version = report.get("sglang_version", "?")
    out = [
        f"SGLang {version}'s own checks (argument parsing, resolution, check_server_args; no weights loaded): "
        f"{len(report.get('candidates') or [])} judged in {report.get('total_s', '?')} s"
    ]
    for name, verdict in compare(ours, report).items():
        sglang = "accepts" if verdict["sglang"] else "refuses"
        flag = "" if verdict["agree"] else "  <- disagree: " + disagreement(verdict["ours"])
        if verdict["at_load"]:
            flag = "  (ours foresee a failure at load, which SGLang's argument checks do not reach)"
        out.append(f"  {name}: ours {'ok' if verdict['ours'] else 'refused'}, SGLang {sglang}{flag}")
        if verdict["refusal"]:
            out.append(f"    SGLang: {verdict['refusal']}")
        out += [f"    {line}" for line in verdict["rewrites"][:rewrites_shown]]
        if len(verdict["rewrites"]) > rewrites_shown:
            out.append(f"    ... and {len(verdict['rewrites']) - rewrites_shown} more resolved fields")
        out += [f"    SGLang warns: {shown(warning)}" for warning in verdict["warnings"][:WARNINGS_SHOWN]]
    return out


def disagreement(ours_ok: bool) -> str:
    if ours_ok:
        return "our rules miss this (rule for review); SGLang's refusal wins at deploy"
    return "SGLang's argument checks take it, our rules foresee a failure later, at model init or load (rule for review)"


def deploy_refusal(layout: str, report: Mapping[str, Any]) -> str:
    """Why a deploy stops before anything changes, or '' when SGLang accepts the layout (or was not asked)."""
    hatch = "(-e sglang_oracle=false deploys without SGLang's checks, for an install that cannot run them.)"
    if report.get("failed") and report.get("sandbox"):
        return (
            f"SGLang's own checks for layout {layout} could not run in the unit's sandbox, so the layout would not "
            f"start either. {report['failed']}\nNothing was changed. {hatch}"
        )
    if report.get("failed"):
        return f"SGLang's own checks for layout {layout} gave no verdict: {report['failed']}. Nothing was changed. {hatch}"
    if report.get("import_error"):
        return (
            f"SGLang's own checks could not run on the host: {report['import_error']}. Repair the install "
            f"(playbooks/provision.yml); nothing was changed. {hatch}"
        )
    candidate = next((c for c in report.get("candidates") or [] if c["name"] == layout), None)
    if candidate is None or candidate["accepted"]:
        return ""
    return (
        f"SGLang {report.get('sglang_version', '')} refuses layout {layout} with its own check: "
        f"{refusal_text(candidate['refusal'])}. Fix the layout's flags; nothing was changed. {hatch}"
    )
