"""The rehearsal boxes' cache of code compiled from zips (tests/rehearsal/zipimport_cache.py): it runs what
Python would have compiled, names the right file in tracebacks and compiles a changed source afresh."""

from __future__ import annotations

import traceback

from tests.rehearsal import zipimport_cache


def test_a_cached_compile_runs_the_same_code_under_the_file_name_of_the_import(tmp_path, monkeypatch):
    monkeypatch.setattr(zipimport_cache, "CACHE_DIR", str(tmp_path / "cache"))
    source = b"def fail():\n    raise ValueError('from the zip')\n\nANSWER = 42\n"
    first = zipimport_cache._cached_compile("/tmp/one.zip/mod.py", source)
    (cached,) = (tmp_path / "cache").iterdir()
    again = zipimport_cache._cached_compile("/tmp/two.zip/mod.py", source)
    namespace: dict = {}
    exec(again, namespace)
    assert namespace["ANSWER"] == 42 and again.co_code == first.co_code
    try:
        namespace["fail"]()
    except ValueError as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1].filename
    assert where == "/tmp/two.zip/mod.py"  # the import's own path, not the one first compiled
    changed = zipimport_cache._cached_compile("/tmp/two.zip/mod.py", source.replace(b"42", b"43"))
    exec(changed, namespace)
    assert namespace["ANSWER"] == 43 and len(list((tmp_path / "cache").iterdir())) == 2 and cached.exists()


def test_an_unreadable_cache_entry_is_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setattr(zipimport_cache, "CACHE_DIR", str(tmp_path))
    source = b"ANSWER = 1\n"
    zipimport_cache._cached_compile("m.py", source)
    (entry,) = tmp_path.iterdir()
    entry.write_bytes(b"\x00not marshal")
    namespace: dict = {}
    exec(zipimport_cache._cached_compile("m.py", source), namespace)
    assert namespace["ANSWER"] == 1
