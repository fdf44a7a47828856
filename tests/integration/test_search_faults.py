"""The layout search under faults: a controller killed or stopped mid-search, a candidate that fails to start.

They share the machine with the other worker (test_search.py holds the clock-measured search), so their
bounds on measured rates are the wider ones (4%).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.test_deploy import serving_only
from tests.integration.test_search import records, search, search_args, serving, the_manifest
from tests.integration.test_stopping import alive
from tests.rehearsal.bench import benchmarks_argv, tool_env
from tests.rehearsal.gpu_host import GPU_HOST, true_decode_tok_s
from tests.rehearsal.playbook import REPO


def power_limits(provisioned) -> list[str]:
    """The box's GPU power limits as nvidia-smi reports them (the stand-in's, set with -pl)."""
    query = provisioned.box.run("nvidia-smi", "--query-gpu=index,power.limit", "--format=csv,noheader,nounits")
    return [line.split(",")[1].strip() for line in query.stdout.splitlines()]


def test_a_killed_controller_costs_at_most_the_candidate_in_progress_and_its_power_limit_goes_back(
    provisioned, tmp_path, private_tmp
):
    """The power axis under a SIGKILL: the limited candidate's unit holds its limit while it runs, and the resumed
    search, leaving the original layout serving, puts the GPUs' own limit back."""
    provisioned.playbook("deploy.yml", "-e", "layout=tp8").succeeded()
    assert power_limits(provisioned) == ["600.00"] * 8
    results = tmp_path / "results"
    # Every grid point (--strategy grid): two candidates of one layout, the host's own limit and 300 W.
    options = ("--layouts", "ep8", "--grid", "host.power_limit=none,300", "--strategy", "grid")
    options += ("--levels", "1,16", "--leave", "original")
    process = subprocess.Popen(
        benchmarks_argv(*search_args(provisioned, results, *options)),
        cwd=REPO,
        env=tool_env(TMPDIR=str(private_tmp)),  # a SIGKILL leaves its runner's private directory behind
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    first = ""
    while time.monotonic() < deadline and not first:
        time.sleep(0.5)
        found = list(results.glob("*/searches/*.json"))
        statuses = [(e["name"], e["status"]) for e in json.loads(found[0].read_text())["candidates"]] if found else []
        # Killed once the second candidate's unit has set its limit (ExecStartPre), before it is measured.
        if len(statuses) == 2 and statuses[0][1] == "measured" and statuses[1][1] == "running":
            first = statuses[0][0] if power_limits(provisioned) == ["300.00"] * 8 else ""
    assert first, "the search never got to its second candidate's start"
    # The controller dies with everything it started (as when its machine goes down): no clean-up runs.
    victims = [process.pid, *(child.pid for child in psutil.Process(process.pid).children(recursive=True))]
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    process.wait(timeout=30)

    resumed = search(provisioned, results, *options)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
    assert "1 to launch, 0 refused by preflight, 1 kept from the earlier run" in resumed.stdout
    state = the_manifest(results)
    assert [e["status"] for e in state["candidates"]] == ["measured", "measured"]
    assert len(records(results, first)) == 1  # measured once, before the kill
    second = state["candidates"][1]["name"]
    assert len(records(results, second)) == 1
    # The host's own limit lets all 16 run up to the 961 roofline; 300 W takes 29% off it above 4 requests.
    peaks = {e["overrides"]["host.power_limit"]: e["scores"]["peak"] for e in state["candidates"]}
    assert peaks[None] == pytest.approx(GPU_HOST["peak_tok_s"]["tp8-ep8-pp1-dp1"], rel=0.04)
    limited = 16 * true_decode_tok_s("tp8-ep8-pp1-dp1", 16, knobs={"host.power_limit": 300})
    assert peaks[300] == pytest.approx(limited, rel=0.04) and limited < 0.75 * peaks[None]
    assert state["winners"]["peak"]["name"] == first
    assert state["original_layout"] == "tp8" and state["serving_at_end"] == "tp8" == serving(provisioned)
    # tp8's unit sets no limit, and the candidate's, stopped, put the GPUs' own back.
    assert power_limits(provisioned) == ["600.00"] * 8


def test_a_candidate_that_fails_to_start_is_diagnosed_and_the_search_goes_on(provisioned, tmp_path):
    """The simulated weights grow to 600 GiB (75 GiB per GPU) where preflight's estimate from config.json says 553:
    at mem-fraction-static 0.78 the stand-in has 74.1 GiB per GPU and runs out of memory loading; at 0.88 it fits."""
    sim_file = provisioned.box.root / "etc" / "sglang-standin.json"
    sim_file.write_text(json.dumps({**GPU_HOST, "weights_gib": 600}))
    try:
        results = tmp_path / "results"
        done = search(
            provisioned,
            results,
            "--layouts",
            "ep8",
            "--grid",
            "mem-fraction-static=0.78,0.88",
            "--strategy",
            "grid",
            "--levels",
            "1",
            "--leave",
            "none",
        )
    finally:
        sim_file.write_text(json.dumps(GPU_HOST))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    by_fraction = {e["overrides"]["mem-fraction-static"]: e for e in the_manifest(results)["candidates"]}
    failed, measured = by_fraction[0.78], by_fraction[0.88]
    assert failed["status"] == "failed_to_start" and "cause: out of gpu memory" in failed["error"].lower()
    assert "Rolled back" in failed["error"] or "nothing serves" in failed["error"].lower()
    assert measured["status"] == "measured" and measured["scores"]["c1"] > 0
    assert the_manifest(results)["winners"]["c1"]["name"] == measured["name"]


def command_of(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # gone, or a zombie, since it was listed
        return ""


def samplers_of(pid: int) -> list[str]:
    """The GPU samplers (nvidia-smi dmon, under its time bound) of run `pid`, on the box (its samples' folder is
    named after the run's process: benchmarks/leftovers.py)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            command = " ".join(process.cmdline())
            if "dmon" in command and f"sglang-bench-gpu-{pid}-" in command:
                found.append(command)
    return found


def test_a_search_stopped_by_sigterm_mid_measurement_leaves_nothing_running(provisioned, tmp_path, private_tmp):
    """As `timeout` or a CI limit stops it: the level in progress ends, Locust and the playbooks with it, the
    GPU sampler on the server host too, the runner's temporary folders (which hold the key) go, and the box is
    left with one layout serving, enabled and recorded."""
    provisioned.playbook("deploy.yml", "-e", "layout=tp8").succeeded()
    results = tmp_path / "results"
    key_file = tmp_path / "key"
    key_file.write_text("sk-sigterm-test-0123456789\n")
    options = ("--layouts", "ep8", "--levels", "1,16", "--leave", "original", "--api-key-file", str(key_file))
    options += ("--gpu-interval", "1")  # the sampler runs on the box while Locust runs
    log = tmp_path / "search.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            benchmarks_argv(*search_args(provisioned, results, *options)),
            cwd=REPO,
            env=tool_env(TMPDIR=str(private_tmp)),
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 300
        descendants: list[int] = []
        while time.monotonic() < deadline and not descendants:
            time.sleep(0.5)
            assert process.poll() is None, log.read_text()[-3000:]
            family = psutil.Process(process.pid).children(recursive=True)
            if any("locust" in command_of(child) for child in family) and samplers_of(process.pid):
                descendants = [child.pid for child in family]
        assert descendants, f"no measurement under way after 300 s:\n{log.read_text()[-3000:]}"
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
    output = log.read_text()
    assert process.returncode != 0 and "search interrupted" in output, output[-3000:]
    assert alive(descendants) == [], output[-3000:]
    assert samplers_of(process.pid) == [], output[-3000:]
    assert not list((provisioned.box.root / "tmp").glob("sglang-bench-gpu-*")), output[-3000:]
    assert list(private_tmp.iterdir()) == [], output[-3000:]  # the runner's folder and Locust's, with the key
    assert not list(Path("/tmp").glob(f"sglang-bench-*-{process.pid}-*"))
    serving_only(provisioned.box, provisioned.port, serving(provisioned))


def test_a_full_results_disk_mid_search_is_one_line_and_the_resume_measures_only_what_was_lost(provisioned, tmp_path):
    """The results dir is a small tmpfs that fills while the second candidate deploys: its record cannot be written."""
    results = tmp_path / "results"
    results.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(results)], check=True)
    options = ("--layouts", "ep8", "--grid", "max-running-requests=8,64", "--strategy", "grid")
    options += ("--levels", "1", "--leave", "none")
    try:
        log = tmp_path / "search.log"
        with open(log, "w") as out:
            process = subprocess.Popen(
                benchmarks_argv(*search_args(provisioned, results, *options)), cwd=REPO, env=tool_env(), stdout=out, stderr=out
            )
        deadline, first = time.monotonic() + 300, ""
        while time.monotonic() < deadline and not first and process.poll() is None:
            time.sleep(0.3)
            found = list(results.glob("*/searches/*.json"))
            with contextlib.suppress(ValueError, OSError):
                statuses = [(e["name"], e["status"]) for e in json.loads(found[0].read_text())["candidates"]] if found else []
                if len(statuses) == 2 and statuses[0][1] == "measured" and statuses[1][1] == "running":
                    first = statuses[0][0]
        assert first, log.read_text()[-3000:]
        with open(results / "filler", "wb") as filler, contextlib.suppress(OSError):
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        process.wait(timeout=300)
        output = log.read_text()
        assert process.returncode == 1 and "Traceback" not in output, output[-3000:]
        (said,) = [line for line in output.splitlines() if line.startswith("error:")]
        assert "could not be written" in said and "No space left on device" in said and "free some space" in said
        state = the_manifest(results)  # its last good state: the second candidate was running
        assert [e["status"] for e in state["candidates"]] == ["measured", "running"]
        assert not list(results.rglob(".partial-*"))
        (results / "filler").unlink()
        resumed = search(provisioned, results, *options)
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
        assert "1 to launch, 0 refused by preflight, 1 kept from the earlier run" in resumed.stdout
        assert [e["status"] for e in the_manifest(results)["candidates"]] == ["measured", "measured"]
        assert len(records(results, first)) == 1
    finally:
        subprocess.run(["umount", "--lazy", str(results)], check=False)
