"""The load generators run the controller's Locust, and --loadgen-hosts takes only inventory names."""

from __future__ import annotations

import argparse

import pytest

from benchmarks.sweep import parse_loadgen
from tests.conftest import REPO
from tests.rehearsal.standin import locust_requirement


def test_the_load_generators_locust_is_the_controllers():
    pinned = [line for line in (REPO / "requirements.txt").read_text().splitlines() if line.startswith("locust==")]
    assert pinned == [locust_requirement()]


@pytest.mark.parametrize("text", ["lg-1,lg-2", "localhost", "box_a.example,box-b"])
def test_load_generator_names_are_kept_in_order(text):
    assert parse_loadgen(text) == text


@pytest.mark.parametrize("text", ["", "lg-1,,lg-2", "lg-1,lg-1", "lg-1 lg-2", "all:!lg-2", "lg-1,{{ x }}"])
def test_anything_but_plain_names_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="--loadgen-hosts"):
        parse_loadgen(text)
