"""nvidia-smi dmon samples (the real -s putm -o DT layout) read by column name and summed up per GPU."""

from __future__ import annotations

import pytest

from benchmarks import gpu_telemetry

HEADER = (
    "#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa  rxpci  txpci     fb   bar1"
    "   ccpm\n"
    "#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %      %      %   MB/s   MB/s     MB     MB"
    "     MB\n"
)


def line(gpu: int, sm: object, rx: object, fb: int = 85606, pwr: int = 300) -> str:
    return f" 20261204   00:31:0{gpu}  {gpu}  {pwr}  50  60  {sm}  40  0  0  0  0  {rx}  {rx}  {fb}  2  0\n"


def test_samples_are_read_by_column_name_with_missing_values_and_cut_lines():
    text = HEADER + line(0, 90, 1000) + line(1, 10, "-") + " 20261204 00:31:02 0 300\n" + HEADER + line(0, 100, 3000)
    samples = gpu_telemetry.parse_dmon(text)
    assert [s["gpu"] for s in samples] == [0, 1, 0]  # the cut line is dropped, the repeated header read again
    assert samples[1]["rxpci"] is None and samples[0]["sm"] == 90.0 and samples[2]["fb"] == 85606.0
    # A driver that reorders its columns is still read by name.
    reordered = "# gpu sm pwr\n# Idx % W\n 3 77 410\n"
    assert gpu_telemetry.parse_dmon(reordered) == [
        {"gpu": 3, "sm": 77.0, "pwr": 410.0, "mem": None, "fb": None, "rxpci": None, "txpci": None}
    ]
    assert gpu_telemetry.parse_dmon("no header\n 0 1 2\n") == []


def test_each_gpu_gets_the_mean_and_p95_of_each_field_and_the_headline_names_the_busiest():
    text = HEADER + "".join(line(0, sm, 1000 * sm) for sm in (80, 90, 100)) + "".join(line(1, 0, 0, pwr=30) for _ in range(3))
    summary = gpu_telemetry.summarize(gpu_telemetry.parse_dmon(text), 1)
    assert summary["samples"] == 3 and summary["interval_s"] == 1
    gpu0 = summary["per_gpu"]["0"]
    assert gpu0["sm"]["mean"] == pytest.approx(90.0) and gpu0["sm"]["p95"] == pytest.approx(99.0)
    assert gpu0["sm"]["p50"] == pytest.approx(90.0)
    assert gpu0["rxpci"]["mean"] == pytest.approx(90_000.0)
    headline = gpu_telemetry.headline(summary)
    assert headline["sm_busiest"] == pytest.approx(90.0) and headline["sm_busiest_gpu"] == 0
    assert headline["sm_mean"] == pytest.approx(45.0) and headline["pcie_mb_s"] == pytest.approx(180_000.0)
    assert headline["power_w"] == pytest.approx(330.0)
    assert gpu_telemetry.summarize([], 1) is None and gpu_telemetry.headline(None) is None


@pytest.mark.parametrize(
    ("gpus", "link"),
    [
        ({"pcie_gen": 5, "pcie_width": 16}, 63_016.0),  # 32 GT/s x 16 lanes x 128/130 / 8
        ({"pcie_gen": 4, "pcie_width": 16}, 31_507.2),
        ({"pcie_gen": 2, "pcie_width": 8}, 4_000.0),  # 8b/10b
        ({"pcie_gen": None, "pcie_width": 16}, None),
        ({"pcie_gen": "x", "pcie_width": 16}, None),
        ({}, None),
        (None, None),
    ],
)
def test_the_link_rate_comes_from_the_hosts_gpu_record(gpus, link):
    found = gpu_telemetry.link_mb_s(gpus)
    assert found == (pytest.approx(link) if link else None)
