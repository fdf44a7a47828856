"""The controller's temporary folders of a sweep: a later run removes those a SIGKILLed run left, and no other."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks import leftovers


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_folders_of_a_dead_run_go_those_of_a_live_one_and_others_stay(tmp_path):
    gone = dead_pid()
    stale = tmp_path / f"{leftovers.prefix(leftovers.RUNNER, gone)}abc"
    stale.mkdir()
    (stale / "bench-vars.yml").write_text("bench_api_key: sk-left-behind\n")
    stale_work = tmp_path / f"{leftovers.prefix(leftovers.WORK, gone)}0123"
    stale_work.mkdir()
    live = tmp_path / f"{leftovers.prefix(leftovers.RUNNER)}def"
    live.mkdir()
    other = tmp_path / "sglang-bench-prompts-xyz"
    other.mkdir()
    a_file = tmp_path / f"{leftovers.prefix(leftovers.WORK, gone)}file"
    a_file.write_text("not a folder")
    removed = leftovers.remove_stale((tmp_path,))
    assert sorted(removed) == sorted([stale, stale_work])
    assert not stale.exists() and live.is_dir() and other.is_dir() and a_file.is_file()


def test_a_name_says_its_owner():
    assert leftovers.owner(leftovers.prefix(leftovers.GPU, 4242) + "ff") == 4242
    assert leftovers.owner("sglang-bench-runner-x-") is None and leftovers.owner("other") is None
    assert leftovers.alive(os.getpid()) and not leftovers.alive(dead_pid())
