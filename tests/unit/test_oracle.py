"""SGLang's own verdict: the request to the host, the program that asks SGLang (run here against the stand-in
SGLang's entry points), and how its answer is read beside ours (sglang_layout/oracle.py)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_layout import oracle
from sglang_layout.schema import Layout
from tests.conftest import REPO
from tests.rehearsal.standin import source_tree

PROGRAM = REPO / "roles" / "sglang_service" / "files" / "sglang_args_verdict.py"
INSTALL = {
    "venv": "/opt/sglang/venv-0.5.23",
    "python_version": "3.11",
    "cuda_home": "/usr/local/cuda-13.0",
    "base_env": {},
    "user": "sglang",
    "group": "sglang",
    "state_dir": "/var/lib/sglang",
}


def build(layouts: list[Layout], gpu_ids=None, overrides=None) -> dict:
    argv = {
        layout.name: ["--model-path", "/srv/m", "--tp-size", str(layout.tp), "--config", "%d/sglang-secrets.yaml"]
        for layout in layouts
    }
    return oracle.request(layouts, argv, gpu_ids=gpu_ids, hardening_overrides=overrides or {}, **INSTALL)


def test_the_request_leaves_the_secrets_out_and_gives_each_candidate_its_own_environment():
    ep4 = Layout(name="ep4", tp=4, ep=4, env={"NCCL_P2P_DISABLE": "1"})
    tp8 = Layout(name="tp8", tp=8)
    asked = build([ep4, tp8], gpu_ids=[0, 1, 2, 3, 4, 5, 6, 7])
    assert [c["args"] for c in asked["candidates"]] == [
        ["--model-path", "/srv/m", "--tp-size", "4"],
        ["--model-path", "/srv/m", "--tp-size", "8"],
    ]
    first, second = asked["candidates"]
    assert first["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and first["env"]["NCCL_P2P_DISABLE"] == "1"
    assert second["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7" and "NCCL_P2P_DISABLE" not in second["env"]
    # One process for all: it sees the widest candidate's GPUs, as the service user, in the units' sandbox.
    assert asked["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert asked["python"] == "/opt/sglang/venv-0.5.23/bin/python" and asked["user"] == "sglang"
    assert "ProtectSystem=strict" in asked["properties"] and "DevicePolicy=closed" in asked["properties"]
    assert "ReadWritePaths=/var/lib/sglang" in asked["properties"]


def test_one_candidate_runs_under_its_own_sandbox_overrides_and_many_under_the_common_ones():
    loose = Layout(name="loose", tp=8, hardening={"ProtectHome": None, "SystemCallFilter": "@system-service pidfd_getfd"})
    alone = build([loose], overrides={"PrivateTmp": "no"})["properties"]
    assert "ProtectHome=yes" not in alone and "SystemCallFilter=@system-service pidfd_getfd" in alone and "PrivateTmp=no" in alone
    together = build([loose, Layout(name="tp8", tp=8)], overrides={"PrivateTmp": "no"})["properties"]
    assert "ProtectHome=yes" in together and "SystemCallFilter=@system-service" in together and "PrivateTmp=no" in together


REPORT = {
    "sglang_version": "0.5.23",
    "total_s": 4.2,
    "candidates": [
        {
            "name": "ep4",
            "accepted": True,
            "refusal": None,
            "resolved": [
                {
                    "field": "random_seed",
                    "parsed": None,
                    "resolved": 1234,
                    "by": "_handle_missing_default_values",
                    "declared": False,
                },
                {"field": "attention_backend", "parsed": None, "resolved": "flashinfer", "by": "_attention", "declared": False},
                {"field": "ep_size", "parsed": 4, "resolved": 8, "by": "_a2a_ep_size", "declared": True},
            ],
        },
        {
            "name": "dcpq",
            "accepted": False,
            "refusal": {
                "type": "ValueError",
                "message": "--dcp-replicate-q-proj requires --dcp-size > 1.",
                "where": "sglang/srt/arg_groups/parallel_hook.py:267: raise ValueError(",
            },
            "resolved": [],
        },
        {"name": "tp2ep4", "accepted": True, "refusal": None, "resolved": []},
    ],
}
OURS = {"ep4": {"ok": True}, "dcpq": {"ok": True}, "tp2ep4": {"ok": False}}


def test_both_verdicts_side_by_side_with_each_disagreement_said_and_rewrites_before_choices():
    shown = oracle.lines(OURS, REPORT)
    assert shown[0].startswith("SGLang 0.5.23's own checks") and "3 judged in 4.2 s" in shown[0]
    assert shown[1] == "  ep4: ours ok, SGLang accepts"
    assert (
        shown[2] == "    rewrites ep_size: 4 -> 8 (_a2a_ep_size)"
        and shown[3] == "    chooses attention_backend: None -> flashinfer (_attention)"
    )
    assert not any("random_seed" in line for line in shown)  # a fresh seed every launch says nothing
    assert "  dcpq: ours ok, SGLang refuses  <- disagree: our rules miss this (rule for review)" in shown[4]
    where = "[sglang/srt/arg_groups/parallel_hook.py:267: raise ValueError(]"
    assert shown[5] == f"    SGLang: ValueError: --dcp-replicate-q-proj requires --dcp-size > 1. {where}"
    assert "tp2ep4: ours refused, SGLang accepts  <- disagree: SGLang's argument checks take it, our rules foresee" in shown[6]
    # Refused by a rule that foresees a failure at load only (no weights, no model in SGLang's checks): no disagreement.
    at_load = {**OURS, "tp2ep4": {"ok": False, "findings": [{"severity": "error", "rule": "moe-tp-width"}]}}
    quiet = oracle.lines(at_load, REPORT)
    assert "  tp2ep4: ours refused, SGLang accepts  (ours foresee a failure at load, which SGLang's argument checks" in quiet[6]
    assert not any("tp2ep4" in line and "disagree" in line for line in quiet)


def test_sglangs_warnings_are_shown_under_its_verdict():
    warned = {
        "sglang_version": "0.5.23",
        "candidates": [{"name": "eagle", "accepted": True, "resolved": [], "warnings": ["w1", "w2", "w3", "w4"]}],
    }
    assert oracle.lines({}, warned)[2:] == ["    SGLang warns: w1", "    SGLang warns: w2", "    SGLang warns: w3"]


def test_a_deploy_is_refused_only_for_what_sglang_refuses_and_says_the_escape_hatch():
    assert oracle.deploy_refusal("ep4", REPORT) == "" and oracle.deploy_refusal("absent", REPORT) == ""
    said = oracle.deploy_refusal("dcpq", REPORT)
    assert said.startswith("SGLang 0.5.23 refuses layout dcpq with its own check: ValueError: --dcp-replicate-q-proj")
    assert "nothing was changed" in said and "-e sglang_oracle=false" in said


def test_without_an_answer_our_rules_stand_alone_and_say_so():
    assert oracle.lines(OURS, {"skipped": "-e sglang_oracle=false"}) == [
        "SGLang's own checks: not asked (-e sglang_oracle=false); our rules stand alone."
    ]
    assert oracle.lines(OURS, {"import_error": "ImportError: libcuda.so.1"})[0].endswith("ImportError: libcuda.so.1")


def test_a_sandbox_systemd_cannot_set_up_is_diagnosed_from_systemds_lines_and_stops_the_deploy():
    stderr = (  # systemd-run's own lines, then the transient unit's journal
        "Running as unit: sglang-args-verdict-7-1.service; invocation ID: 5d1c\n"
        "Finished with result: exit-code\n"
        "Main processes terminated with: code=exited/status=226\n"
        "sglang-args-verdict-7-1.service: Failed to set up mount namespacing: /srv/not-there: No such file or directory\n"
        "sglang-args-verdict-7-1.service: Main process exited, code=exited, status=226/NAMESPACE\n"
    )
    failed = {"failed": False, "failed_when_result": False, "msg": "SGLang's checks gave no verdict (exit 226)", "stderr": stderr}
    report = oracle.outcome(failed, "-")
    assert report["failed"].startswith("Cause: systemd could not set up the server's process (it never ran).")
    assert "status=226/NAMESPACE" in report["failed"]
    said = oracle.deploy_refusal("tp8", report)
    assert said.startswith(
        "SGLang's own checks for layout tp8 could not run in the unit's sandbox, so the layout would not start"
    )
    assert "Nothing was changed." in said and "-e sglang_oracle=false" in said
    assert oracle.lines(OURS, report)[0] == "SGLang's own checks could not run in the units' sandbox:"
    # Not asked: the reason; answered: the report itself.
    skipped = {"skipped": True, "changed": False, "skip_reason": "Conditional result was False"}
    assert oracle.outcome(skipped, "-e sglang_oracle=false") == {"skipped": "-e sglang_oracle=false"}
    assert oracle.outcome({"report": REPORT, "changed": False}, "-") == REPORT
    assert oracle.deploy_refusal("tp8", {"skipped": "no host"}) == ""
    # No verdict for another reason (a timeout): said as it is, not blamed on the sandbox.
    timed_out = oracle.outcome({"msg": "SGLang's checks did not finish within 300 s", "stderr": ""}, "-")
    assert timed_out == {"failed": "SGLang's checks did not finish within 300 s", "sandbox": False}
    assert oracle.deploy_refusal("tp8", timed_out).startswith("SGLang's own checks for layout tp8 gave no verdict: SGLang's")


def test_the_module_runs_one_transient_unit_with_the_sandbox_and_no_secret_on_its_command_line():
    spec = importlib.util.spec_from_file_location(
        "sglang_args_verdict_module", REPO / "plugins" / "modules" / "sglang_args_verdict.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    asked = build([Layout(name="tp8", tp=8)], gpu_ids=[0, 1])
    argv = module.systemd_run_argv(asked, 300, "sglang-args-verdict-1-2.service")
    assert argv[:5] == ["systemd-run", "--unit=sglang-args-verdict-1-2.service", "--wait", "--pipe", "--collect"]
    assert (
        "--property=User=sglang" in argv and "--property=ProtectSystem=strict" in argv and "--property=RuntimeMaxSec=300" in argv
    )
    assert "--setenv=CUDA_VISIBLE_DEVICES=0,1" in argv
    assert argv[-3:-1] == ["/opt/sglang/venv-0.5.23/bin/python", "-"]
    assert json.loads(argv[-1])[0]["args"] == ["--model-path", "/srv/m", "--tp-size", "8"]
    assert not any("--config" in word or "secrets" in word for word in argv)


@pytest.fixture(scope="module")
def standin_sglang(tmp_path_factory) -> Path:
    return source_tree(tmp_path_factory.mktemp("standin") / "src")


def ask(standin: Path, candidates: list[list[str]]) -> dict:
    request = [{"name": f"c{i}", "args": ["--model-path", "/srv/m", *args], "env": {}} for i, args in enumerate(candidates)]
    done = subprocess.run(
        [sys.executable, "-", json.dumps(request)],
        input=PROGRAM.read_text(),
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(standin), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def test_the_program_asks_sglang_in_one_process_and_reports_refusals_rewrites_and_warnings(standin_sglang):
    report = ask(
        standin_sglang,
        [
            ["--tp-size", "8", "--ep-size", "4", "--moe-a2a-backend", "deepep"],
            ["--tp-size", "8", "--dcp-replicate-q-proj"],
            ["--tp-size", "8", "--cuda-graph-max-bs", "8"],
            ["--tp-size", "8", "--speculative-algorithm", "EAGLE3"],
        ],
    )
    assert report["sglang_version"] == "0.5.23+standin" and report["cuda_initialised"] is False
    a2a, dcpq, ambiguous, eagle = report["candidates"]
    assert (
        a2a["accepted"]
        and {"field": "ep_size", "parsed": "4", "resolved": 8, "by": "_a2a_ep_size", "declared": True} in a2a["resolved"]
    )
    assert (
        dcpq["refusal"]["type"] == "ValueError"
        and dcpq["refusal"]["message"] == "--dcp-replicate-q-proj requires --dcp-size > 1."
    )
    assert dcpq["refusal"]["where"].startswith("sglang/srt/server_args.py:")
    assert ambiguous["refusal"] == {
        "type": "argparse",
        "message": "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill",
        "where": "",
    }
    assert eagle["accepted"] and any(c["field"] == "max_running_requests" and c["resolved"] == 48 for c in eagle["resolved"])
    assert eagle["warnings"] == [
        "Max running requests is reset to 48 for speculative decoding. "
        "You can override this by explicitly setting --max-running-requests."
    ]


def test_a_broken_install_is_an_answer_not_a_crash(tmp_path):
    broken = tmp_path / "sglang"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('libcudart.so.13: cannot open shared object file')\n")
    report = ask(tmp_path, [["--tp-size", "8"]])
    assert report == {"candidates": [], "import_error": "ImportError: libcudart.so.13: cannot open shared object file"}
