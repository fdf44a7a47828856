"""SGLang's own verdict asked of the REAL sglang 0.5.23 (CPU install), by the program deploy.yml runs on the box
(roles/sglang_service/files/sglang_args_verdict.py), here in one local process; and our parallel rules held
against it: where they fire on CPU they must agree with SGLang, or the difference is one we know and say."""

from __future__ import annotations

import json
import subprocess

import pytest

from sglang_layout import oracle, parallel
from sglang_layout.schema import Layout
from tests.rehearsal import tiny_model
from tests.unit.test_oracle import PROGRAM

CPU = ("--device", "cpu", "--max-total-tokens", "65536")

# Misconfigurations SGLang 0.5.23 refuses at argument time on CPU, each with its own words and where it raised.
REFUSED = {
    "ambiguous flag": (["--cuda-graph-max-bs", "8"], "argparse", "ambiguous option: --cuda-graph-max-bs could match", ""),
    "no such choice": (["--attention-backend", "warp"], "argparse", "argument --attention-backend: invalid choice: 'warp'", ""),
    "attention dp of 0": (["--attn-dp-size", "0"], "ValueError", "--attn-dp-size must be positive (got 0).", "parallel_hook.py"),
    "dp with attention dp": (
        ["--dp-size", "2", "--attn-dp-size", "2"],
        "ValueError",
        "--dp-size 2 with --attn-dp-size 2",
        "parallel_hook.py",
    ),
    "dcp without dcp size": (
        ["--dcp-replicate-q-proj"],
        "ValueError",
        "--dcp-replicate-q-proj requires --dcp-size > 1.",
        "parallel_hook.py",
    ),
    "speculative sink without window": (
        ["--speculative-algorithm", "EAGLE", "--speculative-draft-sink-size", "2"],
        "ValueError",
        "--speculative-draft-sink-size requires --speculative-draft-window-size.",
        "speculative_hook.py",
    ),
    "hicache without radix": (
        ["--enable-hierarchical-cache", "--disable-radix-cache"],
        "ValueError",
        "enable-hierarchical-cache and disable-radix-cache are mutually exclusive",
        "kv_cache_hook.py",
    ),
    "attention dp not dividing tp": (
        ["--tp-size", "2", "--attn-dp-size", "3"],
        "AssertionError",
        "assert cfg.tp_size % cfg.attn_dp_size == 0",
        "parallel_hook.py",
    ),
}
ACCEPTED = {"cpu-a": [], "cpu-b": ["--max-running-requests", "8"]}  # test_real_deploy.py's layouts, which serve
# The same server as cpu-a in SGLang's own resolution (its defaults written out), and one that is not.
SAME_AS_CPU_A = {"cpu-a-steps-1": ["--num-continuous-decode-steps", "1"], "cpu-a-fcfs": ["--schedule-policy", "fcfs"]}
OTHER_THAN_CPU_A = {"cpu-a-steps-4": ["--num-continuous-decode-steps", "4"]}


@pytest.fixture(scope="module")
def judged(real_python, tmp_path_factory):
    """Every candidate above, and our parallel rules' cases, in one process (one import), as deploy.yml asks."""
    model = tiny_model.build(real_python)
    shim = tiny_model.shim(tmp_path_factory.mktemp("shim"))
    cases = {
        **{name: args for name, (args, *_) in REFUSED.items()},
        **ACCEPTED,
        **SAME_AS_CPU_A,
        **OTHER_THAN_CPU_A,
        **{name: args for name, (_, args, _) in RULES.items()},
    }
    request = [{"name": name, "args": ["--model-path", str(model), *CPU, *args], "env": {}} for name, args in cases.items()]
    done = subprocess.run(
        [str(real_python), "-", json.dumps(request)],
        input=PROGRAM.read_text(),
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(shim), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path_factory.mktemp("home"))},
        timeout=600,
        check=True,
    )
    report = json.loads(done.stdout)
    return report, {c["name"]: c for c in report["candidates"]}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_sglang_refuses_each_misconfiguration_in_its_own_words(judged, name):
    _, by_name = judged
    _, kind, words, where = REFUSED[name]
    refusal = by_name[name]["refusal"]
    assert refusal is not None and refusal["type"] == kind and words in refusal["message"], refusal
    assert where in refusal["where"]


def test_the_layouts_that_serve_are_accepted_with_what_sglang_will_really_run(judged):
    report, by_name = judged
    assert report["sglang_version"] == "0.5.23" and report["cuda_initialised"] is False
    for name in ACCEPTED:
        assert by_name[name]["accepted"], by_name[name]["refusal"]
    chosen = {c["field"]: c for c in by_name["cpu-a"]["resolved"]}
    # At least three decisions the command did not make, with the hook that made them.
    assert chosen["attention_backend"]["resolved"] == "torch_native"
    assert chosen["chunked_prefill_size"]["resolved"] and chosen["chunked_prefill_size"]["parsed"] is None
    assert "cuda_graph_config" in chosen and chosen["mem_fraction_static"]["parsed"] is None
    assert len(oracle.rewrites(by_name["cpu-a"])) >= 3


def test_a_command_that_writes_out_sglangs_defaults_resolves_to_the_same_server(judged):
    """The fingerprint the search uses to launch no server twice (docs/search.md), from the real resolution:
    its random seed left out, two parses of one command agree, and a default written out changes nothing."""
    _, by_name = judged
    same = {by_name[name]["fingerprint"] for name in ["cpu-a", *SAME_AS_CPU_A]}
    assert len(same) == 1 and all(len(f) == 16 for f in same)
    assert by_name["cpu-a-steps-4"]["fingerprint"] not in same and by_name["cpu-b"]["fingerprint"] not in same


def test_one_import_then_each_candidate_is_cheap(judged):
    """The figures docs/preflight.md gives (this machine, CPU install): the import and first candidate carry the
    cost; the rest take milliseconds. Bounds are loose: this is a fact about the shape, not a benchmark."""
    report, _ = judged
    later = sorted(c["seconds"] for c in report["candidates"][1:])
    assert report["import_s"] > 0 and later[len(later) // 2] < 1.0
    assert report["max_rss_mib"] < 4096


# Our parallel rules on CPU-checkable cases: (layout, its arguments, how SGLang's verdict relates to ours).
RULES = {
    "dense tp 2 of 8": (
        Layout(name="r1", tp=8, args={"moe-dense-tp-size": 2}),
        ["--tp-size", "8", "--moe-dense-tp-size", "2"],
        "agree",
    ),
    "tp 3 on 2 nodes": (
        Layout(name="r2", tp=3, nnodes=2),
        ["--tp-size", "3", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "127.0.0.1:5000"],
        "agree",
    ),
    # SGLang takes these arguments and fails later (the field notes' TP2 EP4 ZeroDivisionError at model init).
    "ep 4 in tp 2": (Layout(name="r3", tp=2, ep=4), ["--tp-size", "2", "--ep-size", "4"], "fails later"),
    # SGLang takes it, and runs ep 8, not the ep 4 written: our rule refuses a command that does not say what runs.
    "a2a with ep 4 of 8": (
        Layout(name="r4", tp=8, ep=4, args={"moe-a2a-backend": "deepep"}),
        ["--tp-size", "8", "--ep-size", "4", "--moe-a2a-backend", "deepep"],
        "rewrites ep_size",
    ),
}


@pytest.mark.parametrize("name", sorted(RULES))
def test_our_parallel_rules_agree_with_sglang_or_the_difference_is_known(judged, name):
    _, by_name = judged
    layout, _, relation = RULES[name]
    ours_refuse = any(f.severity == "error" for f in parallel.check_parallel(layout, None, None))
    theirs = by_name[name]
    assert ours_refuse, f"our rules no longer refuse {name}"
    if relation == "agree":
        assert not theirs["accepted"], f"SGLang accepts {name}: our rule is stricter than SGLang, review it"
    else:
        assert theirs["accepted"], f"SGLang now refuses {name} itself: update the relation"
        if relation.startswith("rewrites"):
            assert any(c["field"] == relation.split()[1] and c["declared"] for c in theirs["resolved"])
