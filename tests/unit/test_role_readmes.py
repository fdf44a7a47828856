"""Each role's README lists every variable its argument specs define (the specs stay the source)."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import REPO

ROLES = sorted(path.parent.parent.name for path in (REPO / "roles").glob("*/meta/argument_specs.yml"))


@pytest.mark.parametrize("role", ROLES)
def test_the_role_readme_names_every_variable_of_its_argument_specs(role):
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    readme = (REPO / "roles" / role / "README.md").read_text()
    missing = [name for entry in specs.values() for name in (entry.get("options") or {}) if f"`{name}`" not in readme]
    assert not missing, f"roles/{role}/README.md does not mention {missing}"
    for entry in specs:
        assert f"Entry point `{entry}`" in readme
