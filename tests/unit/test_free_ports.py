"""The rehearsal's loopback ports (tests/rehearsal/box.py): a router once got the same port twice."""

from __future__ import annotations

import pytest

from tests.rehearsal import box


def test_a_process_never_gets_the_same_port_twice(monkeypatch):
    monkeypatch.setattr(box, "_HANDED_OUT", set())
    ports = [box.free_port() for _ in range(500)]
    assert len(set(ports)) == 500
    low, high = box._ephemeral_range()
    assert all(port in box.PORTS and not low <= port <= high for port in ports)


@pytest.mark.parametrize(("worker", "count"), [("gw0", "2"), ("gw1", "2"), ("gw2", "3")])
def test_each_xdist_worker_picks_from_ports_no_other_worker_picks(monkeypatch, worker, count):
    monkeypatch.setattr(box, "_HANDED_OUT", set())
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", count)
    assert {box.free_port() % int(count) for _ in range(50)} == {int(worker[2:])}
