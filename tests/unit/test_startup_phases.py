"""Where a start went: SGLang's own startup lines read from the unit's journal (plugins/module_utils/sglang_host.py)."""

from __future__ import annotations

from benchmarks.search import report
from tests.unit.host_modules import host_helpers

# journalctl --output=short-monotonic, as SGLang 0.5.23 logs a start on 8 GPUs (two ranks shown), started at 1000.0 s.
JOURNAL = """\
[ 1000.100000] box systemd[1]: Started sglang-k26-ep8.service.
[ 1003.000000] box python[411]: [10:00:03 TP0] Load weight begin. avail mem=93.12 GB
[ 1211.500000] box python[411]: [10:03:31 TP1] Load weight end. elapsed=208.43 s, mem usage=73.11 GB.
[ 1212.000000] box python[411]: [10:03:32 TP0] Load weight end. elapsed=209.02 s, mem usage=73.12 GB.
[ 1215.900000] box python[411]: [10:03:35 TP0] Memory pool end. avail mem=9.80 GB
[ 1216.000000] box python[411]: [10:03:35 TP0] Capture target decode CUDA graph begin.
[ 1420.400000] box python[411]: [10:07:00 TP0] Capture target decode CUDA graph end. elapsed=204.40 s.
[ 1425.000000] box python[411]: [10:07:05] The server is fired up and ready to roll!
"""


def test_each_phase_ends_at_its_last_line_counted_from_the_units_start():
    phases = host_helpers().startup_phases(JOURNAL, "1000000000")  # ExecMainStartTimestampMonotonic, in us
    assert phases == {"weights_loaded": 212.0, "kv_cache_sized": 215.9, "graphs_captured": 420.4, "ready": 425.0}
    said = report.startup_text(phases)
    assert said == "weights 212.0 s, KV cache +3.9 s, graphs +204.5 s, ready +4.6 s"


def test_a_start_without_graphs_or_a_clock_says_what_it_has():
    helpers = host_helpers()
    no_graphs = "\n".join(line for line in JOURNAL.splitlines() if "graph" not in line)
    assert list(helpers.startup_phases(no_graphs, "1000000000")) == ["weights_loaded", "kv_cache_sized", "ready"]
    on_cpu = "[ 1050.000000] box python[9]: Capture target decode CPU graph end. elapsed=1.00 s"
    assert helpers.startup_phases(on_cpu, "1000000000") == {"graphs_captured": 50.0}
    assert helpers.startup_phases(JOURNAL, "0") == {} and helpers.startup_phases("no stamps here", "1000000000") == {}


def test_the_report_lists_each_launch_and_the_mean_but_not_a_server_never_launched():
    state = {
        "candidates": [
            {"name": "ep8", "startup": {"weights_loaded": 200.0, "ready": 400.0}},
            {"name": "ep4", "startup": {"weights_loaded": 220.0, "ready": 440.0}},
            {"name": "ep8-gx", "startup": {"weights_loaded": 200.0, "ready": 400.0}, "same_server_as": "ep8"},
        ]
    }
    assert report.startup_lines(state) == [
        "ep8: weights 200.0 s, ready +200.0 s",
        "ep4: weights 220.0 s, ready +220.0 s",
        "mean start to ready: 420.0 s over 2 launches",
    ]
