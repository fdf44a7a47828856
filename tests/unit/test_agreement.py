"""status.yml's plain words when the running, enabled and recorded layouts disagree (sglang_layout/agreement.py)."""

from sglang_layout.agreement import disagreements, layout_of

EP8, TP8 = "sglang-k26-ep8.service", "sglang-k26-tp8.service"


def state(**overrides):
    base = {"recorded_unit": EP8, "running": [EP8], "enabled": [EP8], "failed": [], "health_status": 200, "model_slug": "k26"}
    return disagreements(**{**base, **overrides})


def test_a_settled_host_agrees():
    assert state() == []
    assert state(recorded_unit="", running=[], enabled=[]) == []  # stopped on purpose: nothing to put right


def test_a_swap_cut_off_after_the_start_is_named_with_its_fix():
    """The controller killed during tp8's health wait: ep8 stopped and disabled, tp8 up, never enabled nor recorded."""
    [not_enabled, not_recorded] = state(running=[TP8], enabled=[])
    assert not_enabled.startswith(f"{TP8} runs but is not enabled: nothing would start at boot")
    assert not_recorded.startswith(f"the record says {EP8} but {TP8} runs")
    assert all(line.endswith("Fix: ansible-playbook deploy.yml -e layout=tp8") for line in (not_enabled, not_recorded))


def test_nothing_serving_names_the_recorded_layout_and_what_failed():
    [line] = state(running=[], enabled=[TP8], failed=[TP8])
    assert line.startswith(f"nothing serves, but the record says {EP8}; {TP8} failed (journalctl -u {TP8} says why)")
    assert line.endswith("deploy.yml -e layout=ep8")


def test_two_running_a_silent_server_and_an_instance():
    [both] = state(running=[EP8, TP8], enabled=[EP8])
    assert "run at once" in both and both.endswith("layout=ep8")
    [silent] = state(health_status=503)
    assert "answers 503" in silent and f"journalctl -u {EP8}" in silent
    assert state(running=[TP8], enabled=[EP8, TP8], recorded_unit=TP8, limit="box-r0")[0].endswith(
        "deploy.yml -e layout=tp8 --limit box-r0"
    )
    assert layout_of("sglang-k26-tp4.r1.service", "k26") == "tp4"
