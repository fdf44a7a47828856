"""Open-loop levels: the seeded arrival schedule, the workload's counts, the figures and their names."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from benchmarks import cli, repeats, report
from benchmarks.metrics import arrival_figures, level_metrics
from benchmarks.records import RequestRecord
from benchmarks.workload import Workload, level_id, level_name, parse_rates


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 4.0])
def test_the_gaps_are_gamma_with_the_rates_mean_and_the_burstiness_cv(locustfile, burstiness):
    gaps = np.fromiter(itertools.islice(locustfile.arrival_gaps(3, 20.0, burstiness), 40_000), float)
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=0.02)
    # A gamma of shape k has CV 1/sqrt(k): 1 is Poisson, above 1 steadier, below 1 burstier.
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), abs=0.03)


def test_the_schedule_is_the_seeds(locustfile):
    first = list(itertools.islice(locustfile.arrival_gaps(7, 5.0, 1.0), 50))
    assert first == list(itertools.islice(locustfile.arrival_gaps(7, 5.0, 1.0), 50))
    assert first != list(itertools.islice(locustfile.arrival_gaps(8, 5.0, 1.0), 50))


def test_an_open_loop_workload_counts_in_seconds_of_arrivals():
    workload = Workload(levels=[1], request_rates=[0.5, 8.0], rounds=4, min_requests=16, processes=2)
    assert workload.level_keys() == ["r0.5", "r8"]
    assert workload.rate_of("r8") == 8.0 and workload.rate_of("16") is None
    assert (workload.measured_requests("r0.5"), workload.measured_requests("r8")) == (16, 32)
    assert (workload.warmup_requests("r0.5"), workload.warmup_requests("r8")) == (1, 8)
    assert workload.users("r8") == 2  # one scheduler per load-generator process
    extra = workload.extravars()
    assert extra["bench_levels"] == ["r0.5", "r8"] and extra["bench_rates"] == {"r0.5": 0.5, "r8": 8.0}
    assert extra["bench_users"] == {"r0.5": 2, "r8": 2}
    closed = Workload(levels=[1, 16]).extravars()
    assert closed["bench_levels"] == [1, 16] and closed["bench_users"] == {"1": 1, "16": 16} and closed["bench_rates"] == {}


def test_levels_and_request_rates_exclude_each_other(capsys):
    parser = cli.build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--url", "http://127.0.0.1:1", "--levels", "1,2", "--request-rates", "4"])
    assert "not allowed with argument" in capsys.readouterr().err
    args = parser.parse_args(["run", "--url", "http://127.0.0.1:1", "--request-rates", "4,0.5,4"])
    assert Workload.from_cli_args(args).request_rates == [4.0, 0.5]


@pytest.mark.parametrize("text", ["", "fast", "0", "-1", "1,nan", "200000"])
def test_bad_rates_are_refused_by_name(text):
    with pytest.raises(Exception, match="--request-rates"):
        parse_rates(text)


def test_burstiness_without_rates_is_refused_before_anything_runs(capsys):
    assert cli.main(["run", "--url", "http://127.0.0.1:1", "--burstiness", "4"]) == 2
    assert "give --request-rates too" in capsys.readouterr().err


def test_the_search_refuses_request_rates(capsys):
    assert cli.main(["search", "--server-host", "box", "--request-rates", "4"]) == 2
    assert "--request-rates belongs to `run`" in capsys.readouterr().err


def record(index: int, planned: float, late: float, phase: str = "measured") -> RequestRecord:
    sent = planned + late
    return RequestRecord(
        level=10.0,
        phase=phase,
        sent=sent,
        planned=planned,
        end=sent + 0.5,
        ok=True,
        requested_tokens=4,
        output_tokens=4,
        chunk_times=[sent + 0.1 + 0.1 * k for k in range(4)],
        chunk_tokens=[1, 1, 1, 1],
    )


def test_arrival_figures_compare_what_was_sent_with_the_schedule():
    # A steady 10/s schedule; the client sends each 2 ms late, except the 5th, 30 ms late.
    records = [record(i, i * 0.1, 0.030 if i == 5 else 0.002) for i in range(21)]
    records.append(record(21, 2.1, 0.002, phase="cooldown"))  # outside the measured requests
    asked = {"target_rate": 10.0, "burstiness": 1.0, "max_concurrency": 0}
    figures = arrival_figures(records, asked)
    assert figures["target_rate"] == 10.0
    assert figures["planned_rate"] == pytest.approx(10.0) and figures["planned_cv"] == pytest.approx(0.0, abs=1e-9)
    assert figures["achieved_rate"] == pytest.approx(10.0)  # same first and last send offsets
    assert figures["achieved_cv"] > 0.05  # the late one shortened one gap and stretched the next
    assert figures["lateness_ms"]["p50"] == pytest.approx(2.0) and figures["lateness_ms"]["mean"] > 2.0
    assert figures["behind_schedule"] is False


def test_a_client_slower_than_its_schedule_is_flagged_unless_a_cap_made_it_wait():
    # Planned 10/s, but each send slips a further 5 ms: sent at ~9.5/s.
    records = [record(i, i * 0.1, 0.005 * i) for i in range(41)]
    uncapped = arrival_figures(records, {"target_rate": 10.0, "burstiness": 1.0, "max_concurrency": 0})
    assert uncapped["achieved_rate"] == pytest.approx(10 / 1.05) and uncapped["behind_schedule"] is True
    capped = arrival_figures(records, {"target_rate": 10.0, "burstiness": 1.0, "max_concurrency": 4})
    assert capped["behind_schedule"] is False
    level = {"arrival": uncapped, "status": "ok", "concurrency": None}
    assert "fell behind its schedule (add --processes)" in report.arrival_note(level)


def test_an_open_loop_level_is_named_by_its_rate_and_kept_apart_in_repeats():
    asked = {"target_rate": 2.5, "burstiness": 1.0, "max_concurrency": 8}
    records = [record(i, i * 0.4, 0.001) for i in range(10)]
    level = {**level_metrics(records, None, None, asked), "status": "ok", "server_metrics": {}, "loadgen": None}
    assert level["concurrency"] is None and level["arrival"]["target_rate"] == 2.5
    assert level_name(level) == "R=2.5/s, C<=8" and level_id(level) == "r2.5"
    other = {**level, "arrival": {**level["arrival"], "target_rate": 0.5}}
    merged = repeats.merge_runs([[level, other], [level, other]])
    assert [m["arrival"]["target_rate"] for m in merged] == [0.5, 2.5]
    table = report.level_table([level])
    assert "R=2.5/s, C<=8" in table and "sent 2.5/s (schedule 2.5/s)" in table
