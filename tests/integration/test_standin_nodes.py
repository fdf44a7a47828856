"""The STAND-IN's multi-node start: ranks meet at rank 0's --dist-init-addr, and fail in torch's and NCCL's words.

Run locally on loopback, two stand-in processes as two nodes (the box tests run them on two boxes).
"""

from __future__ import annotations

import contextlib
import socket
import time
import urllib.error
import urllib.request

from tests.rehearsal.box import free_port
from tests.rehearsal.standin import local_server, wait_http

FAST = {"load_seconds": 0.4, "prefill_ms": 5, "rendezvous_timeout_s": 3.0}


def rank(tmp_path, node_rank: int, dist_port: int, *more: str, **simulation: object):
    """Rank `node_rank` of a tp 16 layout over two nodes, in its own directory."""
    directory = tmp_path / f"rank{node_rank}"
    directory.mkdir()
    flags = ("--tp-size", "16", "--nnodes", "2", "--node-rank", str(node_rank), "--dist-init-addr", f"127.0.0.1:{dist_port}")
    return local_server(directory, *flags, *more, **{**FAST, **simulation})


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def test_rank_0_is_healthy_only_once_every_rank_has_joined_and_rank_1_answers_health_only(tmp_path):
    port = free_port()
    with rank(tmp_path, 0, port) as (first, url0, _):
        time.sleep(1.5)  # longer than the load: rank 0 is waiting for rank 1, not loading
        assert status(url0 + "/health_generate") == 503 and first.poll() is None
        with rank(tmp_path, 1, port) as (second, url1, _):
            assert wait_http(url0 + "/health_generate", 10, first) == 200
            assert wait_http(url1 + "/health_generate", 10, second) == 200
            assert status(url1 + "/health") == 200
            assert status(url1 + "/v1/models") == 404  # rank 1 serves no API, as SGLang's dummy health server


def test_a_rank_whose_peer_dies_exits_with_the_nccl_watchdog_words(tmp_path):
    port = free_port()
    with rank(tmp_path, 0, port) as (first, url0, log0), rank(tmp_path, 1, port) as (second, _, log1):
        assert wait_http(url0 + "/health_generate", 10, first) == 200
        second.kill()
        assert first.wait(timeout=10) == 1
    text = log0.read_text()
    assert "Process group watchdog thread terminated with exception: NCCL error: remote process exited" in text
    assert "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely." in text
    assert "socketProgress: Connection closed by remote peer 127.0.0.1<" in text
    assert "[rank0]:" in text
    assert "ncclRemoteError" not in log1.read_text()  # killed, it said nothing


def test_rank_1_gives_up_on_an_absent_rank_0_like_torchs_client_socket(tmp_path):
    port = free_port()
    with rank(tmp_path, 1, port) as (alone, _, log):
        assert alone.wait(timeout=15) == 1
    assert f"The client socket has timed out after 3000ms while trying to connect to (127.0.0.1, {port})." in log.read_text()


def test_rank_0_gives_up_on_absent_ranks_like_torchs_store(tmp_path):
    with rank(tmp_path, 0, free_port()) as (alone, _, log):
        assert alone.wait(timeout=15) == 1
    assert "DistStoreError: Timed out after 3 seconds waiting for clients. 1/2 clients joined." in log.read_text()


def test_a_dist_init_port_in_use_fails_rank_0_like_torchs_store(tmp_path):
    port = free_port()
    with contextlib.closing(socket.socket()) as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        with rank(tmp_path, 0, port) as (busy, _, log):
            assert busy.wait(timeout=15) == 1
    assert "EADDRINUSE, message: address already in use" in log.read_text()


def test_a_rank_that_runs_out_of_memory_takes_rank_0_down_with_it(tmp_path):
    port = free_port()
    with (
        rank(tmp_path, 0, port) as (first, _, log0),
        rank(tmp_path, 1, port, gpu_memory_gib=20.0, weights_gib=553) as (second, _, log1),
    ):
        assert second.wait(timeout=15) != 0
        assert first.wait(timeout=15) == 1
    assert "CUDA out of memory" in log1.read_text()
    assert "ncclRemoteError" in log0.read_text()
