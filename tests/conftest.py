"""Shared fixtures: the repository's own declaration and the Kimi K2.6-like model."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from types import ModuleType

import psutil
import pytest
from _pytest.mark.expression import Expression  # what -m means, as pytest reads it (pytest is pinned)

from sglang_layout import flags
from sglang_layout.sources import declaration_from_vars, load_yaml_vars
from tests import alone, reports
from tests.rehearsal import box as boxes
from tests.rehearsal import fixtures as box_fixtures
from tests.rehearsal import real_sglang, stopping

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
KIMI_CONFIG = REPO / "examples" / "models" / "kimi-k2.6" / "config.json"
FLAGS_0_5_23 = DATA / "sglang-0.5.23-flags.json"
REAL_TIER = REPO / "tests" / "real"
STAGED_SEARCH = REPO / "tests" / "integration" / "test_search.py"

# The rehearsal box fixtures (box_support, box, cuda_repo), for the integration and the real tier; the run's
# time per tier, module and worker, and with --count how often each test failed (tests/reports.py).
pytest_plugins = ("tests.rehearsal.fixtures", "tests.reports")


# The box modules' minutes in a clean-clone run (8b41cb4, 7 Dec 2026, both workers busy): they are handed out
# longest first, so that the run ends on short ones and neither worker waits long at the end for the other, nor
# an `alone` test for the other worker's test in progress. A module not listed comes after these, in file order.
BOX_MODULE_MINUTES = {
    "tests/integration/test_router.py": 5.1,
    "tests/integration/test_swap_faults.py": 4.4,
    "tests/integration/test_deploy.py": 4.2,
    "tests/integration/test_search_faults.py": 3.6,
    "tests/integration/test_deploy_trust.py": 2.7,
    "tests/integration/test_provision.py": 2.6,
    "tests/integration/test_search_fleet.py": 2.5,
    "tests/integration/test_search_capacity.py": 2.0,
    "tests/integration/test_multinode.py": 1.8,
    "tests/real/test_real_server.py": 1.4,
    "tests/integration/test_distributed_load.py": 1.4,
    "tests/integration/test_stopping.py": 1.2,
    "tests/integration/test_instances.py": 1.1,
    "tests/integration/test_benchmark_truth.py": 1.1,
    "tests/integration/test_rehearsal_box.py": 0.5,
    "tests/real/test_real_help.py": 0.2,
    "tests/real/test_real_oracle.py": 0.2,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Markers by what a test needs: `-m "not box and not servers"` is the fast loop (lint-speed unit tests),
    `-m "not box"` adds the tests that start local stand-in servers and Locust.

    The parallel run (pytest-xdist, --dist loadfile) gives each module to one worker whole, so a module's
    fixtures are built once; the other worker takes the next module in this order (docs/testing.md):

    1. the staged search (`test_search.py`), the longest box module, beside
    2. the modules without a box or an `alone` test (stand-in servers, Locust, the unit tier), while the
       real-SGLang tier's install runs in the background (`_reaches_real_tier`);
    3. the real-SGLang tier's first module (its box provisioned with that install; the tier's other modules come
       later), then the other box modules, longest first (BOX_MODULE_MINUTES), the `alone_inside` ones among them;
    4. the modules with `alone` tests, last: an alone test waits for the other worker's test in
       progress, and at the end the other worker has little left.
    """
    real_tier, integration = REAL_TIER, REPO / "tests" / "integration"
    for item in items:
        in_real_tier = real_tier in item.path.parents
        if in_real_tier:
            item.add_marker(pytest.mark.real_sglang)
        if in_real_tier or "box_support" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.box)
        elif integration in item.path.parents:
            item.add_marker(pytest.mark.servers)
    items.sort(key=_scheduled(items))  # stable: file order among equals


def _scheduled(items: list[pytest.Item]):
    """Each item's rank in the run's order (pytest_collection_modifyitems says why)."""
    real_modules = sorted({item.path for item in items if REAL_TIER in item.path.parents})
    first_real = real_modules[0] if real_modules else None
    measuring = {item.path for item in items if _alone(item)}
    with_box = {item.path for item in items if item.get_closest_marker("box")}

    def rank(item: pytest.Item) -> tuple[int, float]:
        if item.path == STAGED_SEARCH:
            return 0, 0.0
        if item.path in measuring:
            return 4, 0.0
        if item.path not in with_box:
            return 1, 0.0
        if item.path == first_real:
            return 2, 0.0
        return 3, -BOX_MODULE_MINUTES.get(item.path.as_posix().removeprefix(f"{REPO.as_posix()}/"), 0.0)

    return rank


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM and SIGHUP stop the run as Ctrl-C does, fixtures torn down (tests/rehearsal/stopping.py); the
    xdist controller passes them on to its workers, which run the tests and own their boxes.

    The controller names the xdist run itself, so that it knows which lock folder to remove at the end.
    """
    controller = not hasattr(config, "workerinput")
    distributed = controller and config.pluginmanager.hasplugin("dsession")
    stopping.stop_like_ctrl_c(forward_to=_xdist_workers if distributed else tuple)
    if controller and hasattr(config.option, "testrunuid"):
        config.option.testrunuid = config.option.testrunuid or uuid.uuid4().hex
    # The real tier's install, started beside the first modules: it took 114 s of the tier's 306 s set-up.
    if controller and _reaches_real_tier(config) and box_fixtures.box_support_missing() is None and not real_sglang.prefetched():
        config.stash[_PREFETCH] = real_sglang.start_prefetch(boxes.CACHE / "real-sglang-prefetch.log")


_PREFETCH = pytest.StashKey[subprocess.Popen]()


def _reaches_real_tier(config: pytest.Config) -> bool:
    """Whether this run selects the real-SGLang tier as a whole (then its install starts in the background:
    tests/rehearsal/real_sglang.py, `start_prefetch`)."""
    option = config.option
    if option.keyword or option.collectonly or getattr(option, "count", 1) != 1:
        return False
    if option.markexpr:
        try:
            expression = Expression.compile(option.markexpr)
        except Exception:  # an expression pytest itself rejects, with its own message
            return False
        if not expression.evaluate(lambda name, **_: name in real_sglang.TIER_MARKS):
            return False
    paths = [Path(config.invocation_params.dir, arg.split("::")[0]).resolve() for arg in config.args]
    return real_sglang.among(REAL_TIER, paths)


def _xdist_workers() -> list[int]:
    """The controller's children: its workers (it runs no test itself)."""
    return [child.pid for child in psutil.Process().children()]


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller's last word, after its workers are gone: the alone locks go, and so do the boxes of a
    worker that ended before its teardown did (pytest-xdist gives a stopped worker 10 s, then kills it)."""
    if hasattr(config, "workerinput"):
        return
    prefetch = config.stash.get(_PREFETCH, None)
    if prefetch is not None:
        real_sglang.stop_prefetch(prefetch)
    run_id = getattr(config.option, "testrunuid", None)
    if run_id:
        shutil.rmtree(alone.lock_folder(run_id), ignore_errors=True)
    if config.pluginmanager.hasplugin("dsession"):
        for box in boxes.sweep():
            print(f"\nremoved box {box.name}, left by process {box.owner} (gone before its teardown ended)")


def _alone(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker(alone.MARK) is not None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Each test under the shared turn, an `alone` test's call under the exclusive one (tests/alone.py).

    What the test waited for its turns goes on its reports (`turn_wait_s`), for the run's time summary."""
    lock = alone.lock()
    if lock is None:
        yield
        return
    waited_before = lock.waited_s
    if not lock.exclusive:
        lock.take(exclusive=False)
    item.user_properties.append((reports.TURN_WAIT, lock.waited_s - waited_before))
    try:
        yield
    finally:
        if not (lock.exclusive and _alone(item) and _alone(nextitem)):
            lock.release()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    lock = alone.lock()
    if lock is not None and _alone(item):
        waited_before = lock.waited_s
        lock.take(exclusive=True)
        item.user_properties.append((reports.TURN_WAIT_IN_CALL, lock.waited_s - waited_before))
    yield


@pytest.fixture(scope="session")
def locustfile() -> ModuleType:
    """benchmarks/locustfile.py, for its pure functions, imported without gevent's monkey patching: Locust
    patches the whole process when imported, which would change subprocess and signal handling for every
    later test in the session (os.wait4 then finds its children already reaped)."""
    previous = os.environ.get("LOCUST_SKIP_MONKEY_PATCH")
    os.environ["LOCUST_SKIP_MONKEY_PATCH"] = "1"
    try:
        return importlib.import_module("benchmarks.locustfile")
    finally:  # the Locust processes tests start must patch as usual
        if previous is None:
            del os.environ["LOCUST_SKIP_MONKEY_PATCH"]
        else:
            os.environ["LOCUST_SKIP_MONKEY_PATCH"] = previous


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def kimi_config() -> dict:
    return json.loads(KIMI_CONFIG.read_text())


@pytest.fixture(scope="session")
def flag_table() -> flags.FlagTable:
    return flags.load_table(FLAGS_0_5_23.read_text())


@pytest.fixture(scope="session")
def declared_vars() -> dict:
    return load_yaml_vars([REPO / "group_vars" / "sglang_servers.yml"])


@pytest.fixture(scope="session")
def declaration(declared_vars):
    return declaration_from_vars(declared_vars)


# The tuned EP8 unit's ExecStart flags, as the field notes give them.
# The field notes' unit ran as root with the model in /root/models; this project's service user reads it
# from the declared sglang_model_path instead (group_vars: /srv/models/Kimi-K2.6).
FIELD_NOTES_MODEL_PATH = "/root/models/Kimi-K2.6"
FIELD_NOTES_EP8_TUNED = [
    *("--model-path", "/root/models/Kimi-K2.6", "--port", "30001", "--host", "0.0.0.0"),
    *("--tp-size", "8", "--ep-size", "8", "--mem-fraction-static", "0.88", "--context-length", "32768"),
    *("--max-running-requests", "256", "--num-continuous-decode-steps", "8", "--attention-backend", "triton"),
    *("--trust-remote-code", "--grammar-backend", "none"),
]


def flag_pairs(argv: list[str]) -> dict[str, str | bool]:
    """--flag value / --switch words -> {flag: value or True}: a command compared flag by flag, in any order."""
    pairs, i = {}, 0
    while i < len(argv):
        has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
        pairs[argv[i]] = argv[i + 1] if has_value else True
        i += 2 if has_value else 1
    return pairs


@pytest.fixture(scope="session")
def field_notes_argv() -> list[str]:
    return list(FIELD_NOTES_EP8_TUNED)
