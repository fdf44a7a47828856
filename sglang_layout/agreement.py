"""Whether what serves, what is enabled, what is recorded and what answers agree, and what puts them right.

After an interrupted swap (a controller killed mid-way), a crash, or a hand-made change these can
disagree: the record says ep8, tp8 runs, nothing is enabled, so a reboot would start nothing. status.yml
says so in plain words, with the command that puts it right.
"""

from __future__ import annotations

from collections.abc import Sequence

UNIT_PREFIX = "sglang-"


def layout_of(unit: str, model_slug: str) -> str:
    """sglang-k26-ep8.service (or .r0.service) -> ep8; the unit name itself when it does not parse."""
    stem = unit.removesuffix(".service").split(".")[0]
    prefix = f"{UNIT_PREFIX}{model_slug}-"
    return stem.removeprefix(prefix) if stem.startswith(prefix) else unit


def disagreements(
    *,
    recorded_unit: str,
    running: Sequence[str],
    enabled: Sequence[str],
    failed: Sequence[str],
    health_status: int | None,
    model_slug: str,
    limit: str = "",
) -> list[str]:
    """Each way the host's state disagrees with itself, as a sentence ending in the command that fixes it."""
    deploy = "ansible-playbook deploy.yml -e layout={}" + (f" --limit {limit}" if limit else "")
    problems: list[str] = []
    if len(running) > 1:
        keep = layout_of(recorded_unit if recorded_unit in running else running[0], model_slug)
        return [f"{', '.join(running)} run at once (they share the GPUs and the port). Fix: {deploy.format(keep)}"]
    serving = running[0] if running else ""
    if serving:
        layout = layout_of(serving, model_slug)
        if serving not in enabled:
            at_boot = f"{', '.join(enabled)} would start at boot instead" if enabled else "nothing would start at boot"
            problems.append(f"{serving} runs but is not enabled: {at_boot}. Fix: {deploy.format(layout)}")
        elif len(enabled) > 1:
            others = ", ".join(unit for unit in enabled if unit != serving)
            problems.append(
                f"{others} enabled beside {serving}: at boot they would fight for the GPUs. Fix: {deploy.format(layout)}"
            )
        if recorded_unit != serving:
            said = f"the record says {recorded_unit}" if recorded_unit else "nothing is recorded"
            problems.append(f"{said} but {serving} runs. Fix: {deploy.format(layout)}")
        if health_status != 200:
            answer = f"answers {health_status}" if health_status else "does not answer"
            problems.append(
                f"{serving} runs but its /health_generate {answer} (still loading, or stuck): "
                f"see journalctl -u {serving}; if it stays so, {deploy.format(layout)} or another layout"
            )
        return problems
    wanted = recorded_unit or (enabled[0] if enabled else "")
    if wanted:
        why = f"; {', '.join(failed)} failed (journalctl -u {failed[0]} says why)" if failed else ""
        problems.append(
            f"nothing serves, but {'the record says' if recorded_unit else 'enabled is'} {wanted}{why}. "
            f"Fix: {deploy.format(layout_of(wanted, model_slug))}"
        )
    return problems
