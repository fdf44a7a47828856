"""Each default has one home per side: roles/sglang_defaults for the roles, sglang_layout/defaults.py for Python;
this keeps the two equal, and the roles free of the literals."""

from __future__ import annotations

import re

import yaml

from sglang_layout import defaults
from tests.conftest import REPO
from tests.unit.test_nodes import filter_plugins

ROLE_DEFAULTS = REPO / "roles" / "sglang_defaults" / "defaults" / "main.yml"
BOTH_SIDES = {
    "sglang_defaults_model_slug": defaults.MODEL_SLUG,
    "sglang_defaults_service_user": defaults.SERVICE_USER,
    "sglang_defaults_state_dir": defaults.STATE_DIR,
    "sglang_defaults_port": defaults.PORT,
    "sglang_defaults_bind_address": defaults.BIND_ADDRESS,
    "sglang_defaults_dist_init_port": defaults.DIST_INIT_PORT,
    "sglang_defaults_facts_dir": defaults.FACTS_DIR,
    "sglang_defaults_unit_dir": defaults.UNIT_DIR,
}


def test_the_roles_defaults_equal_the_python_ones():
    declared = yaml.safe_load(ROLE_DEFAULTS.read_text())
    assert {name: declared[name] for name in BOTH_SIDES} == BOTH_SIDES


def test_no_role_or_playbook_writes_a_shared_default_out():
    """The facts directory, the unit directory and the rendezvous port are named by their variable elsewhere."""
    literal = re.compile(r"/etc/ansible/facts\.d|/etc/systemd/system|\b20000\b")
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for path in [*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("roles/*/vars/*.yml"), *REPO.glob("playbooks/**/*.yml")]
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line) and not line.lstrip().startswith("#")
    ]
    assert found == []


def test_a_wildcard_bind_is_reached_on_loopback_and_one_rule_serves_every_caller():
    assert defaults.local_url("0.0.0.0", 30000, "/health_generate") == "http://127.0.0.1:30000/health_generate"
    assert defaults.local_url("", 30000) == "http://127.0.0.1:30000"
    assert defaults.local_url("10.0.0.5", 30080) == "http://10.0.0.5:30080"
    assert defaults.local_url("::1", 30000, "/x") == "http://[::1]:30000/x"
    assert filter_plugins()["sglang_local_url"]("::", "30000", "/health_generate") == "http://127.0.0.1:30000/health_generate"


def test_one_pip_environment_for_every_pinned_install():
    pip_environment = filter_plugins()["sglang_pip_environment"]
    quiet = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    assert pip_environment("") == quiet
    offline = pip_environment("", [], ["/srv/wheels", "/opt/w"], True, {"TMPDIR": "/var/tmp"})
    assert offline == {**quiet, "PIP_FIND_LINKS": "/srv/wheels /opt/w", "PIP_NO_INDEX": "1", "TMPDIR": "/var/tmp"}
    mirrored = pip_environment("https://pypi.example/simple", ["https://extra/a", "https://extra/b"])
    assert mirrored["PIP_INDEX_URL"] == "https://pypi.example/simple"
    assert mirrored["PIP_EXTRA_INDEX_URL"] == "https://extra/a https://extra/b"


def test_uv_gets_the_same_sources_as_options():
    uv_args = filter_plugins()["sglang_uv_source_args"]
    assert uv_args("") == []
    offline = uv_args("", [], ["/srv/wheels", "/opt/w"], True)
    assert offline == ["--find-links", "/srv/wheels", "--find-links", "/opt/w", "--no-index"]
    mirrored = uv_args("https://pypi.example/simple", ["https://extra/a", "https://extra/b"])
    assert mirrored == [
        *("--index-url", "https://pypi.example/simple"),
        *("--extra-index-url", "https://extra/a", "--extra-index-url", "https://extra/b"),
    ]


def test_the_rendered_unit_carries_its_health_url_computed_once():
    from sglang_layout.schema import parse_layouts
    from tests.unit.specs import spec

    layout = parse_layouts({"ep8": {"tp": 8, "ep": 8}})["ep8"]
    assert spec(layout).to_dict()["health_url"] == "http://127.0.0.1:30001/health_generate"  # bound to 0.0.0.0
    assert spec(layout, host="10.1.2.3", port=30002).health_url == "http://10.1.2.3:30002/health_generate"
