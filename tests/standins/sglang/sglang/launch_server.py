"""STAND-IN for `python -m sglang.launch_server` (rehearsal tests only).

Start-up follows SGLang's order and failure modes: argparse (exit 2 on an
unknown, ambiguous or invalid flag), its argument checks (srt/server_args.py), model init (the real ZeroDivisionError
when ep does not fit in tp), weight loading (CUDA out of memory when the
simulated weights exceed the simulated GPUs used), then serving. The HTTP
server answers 503 on /health while the model "loads".
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path

from aiohttp import web

from sglang import __version__, rendezvous, simulation
from sglang.cli_args import build_parser, with_config_file
from sglang.server import Server
from sglang.srt.server_args import ServerArgs

log = logging.getLogger("sglang.launch_server")


def _int(value: object, default: int) -> int:
    return int(value) if value is not None else default


def init_model(args: object) -> None:
    """Model init: SGLang divides the MoE intermediate size by tp // ep // moe_dp."""
    tp, ep = _int(args.tp_size, 1), _int(args.ep_size, 1)
    moe_tp = tp // ep // _int(args.moe_dp_size, 1)
    intermediate = 2048
    log.info("Init MoE layers: moe_tp_size=%d", moe_tp)
    # For tp 2 ep 4 this raises ZeroDivisionError, as SGLang's MoE layer init does.
    _ = intermediate // moe_tp


def load_weights(args: object, sim: simulation.Simulation) -> None:
    tp, pp, dp = _int(args.tp_size, 1), _int(args.pp_size, 1), _int(args.dp_size, 1)
    used = tp * pp * dp // _int(args.nnodes, 1)  # on this node
    listed = [gpu for gpu in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if gpu.strip()]
    if any(not gpu.strip().isdigit() or int(gpu) >= sim.gpu_count for gpu in listed):
        raise RuntimeError(f"CUDA error: invalid device ordinal (CUDA_VISIBLE_DEVICES={','.join(listed)})")
    visible = len(listed) if listed else sim.gpu_count
    if used > visible:
        raise RuntimeError(f"CUDA error: invalid device ordinal (asked for {used} GPUs, {visible} visible)")
    fraction = float(args.mem_fraction_static or 0.88)
    per_gpu = sim.weights_gib_by_model.get(str(args.model_path), sim.weights_gib) / (tp * pp)
    budget = sim.gpu_memory_gib * fraction
    if per_gpu > budget:
        raise MemoryError(
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {per_gpu - budget:.2f} GiB. "
            f"GPU 0 has a total capacity of {sim.gpu_memory_gib:.2f} GiB of which 0 bytes is free."
        )
    return per_gpu


def node_of(args: object, sim: simulation.Simulation) -> rendezvous.Node | None:
    nnodes = _int(args.nnodes, 1)
    if nnodes == 1:
        return None
    gpus = _int(args.tp_size, 1) * _int(args.pp_size, 1) * _int(args.dp_size, 1) // nnodes
    timeout = float(args.dist_timeout) if args.dist_timeout else sim.rendezvous_timeout_s
    return rendezvous.Node(nnodes, _int(args.node_rank, 0), args.dist_init_addr or "127.0.0.1:5000", gpus, timeout)


async def health_only(args: object) -> web.AppRunner:
    """A rank > 0 answers health checks only (SGLang's dummy health server), once its part has loaded."""

    async def healthy(request: web.Request) -> web.Response:
        return web.Response(status=200)

    app = web.Application()
    for path in ("/health", "/health_generate", "/ping"):
        app.router.add_get(path, healthy)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, args.host or "127.0.0.1", int(args.port or 30000)).start()
    return runner


async def serve(args: object, sim: simulation.Simulation) -> None:
    node = node_of(args, sim)
    server = Server(args, sim)
    runner = web.AppRunner(server.app(), access_log=None)
    if node is None or node.rank == 0:  # only rank 0 serves the API
        await runner.setup()
        site = web.TCPSite(runner, args.host or "127.0.0.1", int(args.port or 30000))
        await site.start()  # port in use fails here with OSError [Errno 98]
        log.info("Starting server on %s:%s (stand-in sglang %s)", args.host, args.port, __version__)
    try:
        if node is not None:
            await node.meet()
        split = sim.startup_split
        began = time.monotonic()
        log.info("Load weight begin. avail mem=%.2f GB", sim.gpu_memory_gib)
        await asyncio.sleep(sim.load_seconds * split.get("weights", 1.0) / 2)
        init_model(args)
        await asyncio.sleep(sim.load_seconds * split.get("weights", 1.0) / 2)
        per_gpu = load_weights(args, sim)
        log.info("Load weight end. elapsed=%.2f s, mem usage=%.2f GB.", time.monotonic() - began, per_gpu)
        await asyncio.sleep(sim.load_seconds * split.get("kv_cache", 0.0))
        log.info("Memory pool end. avail mem=%.2f GB", sim.gpu_memory_gib * 0.1)
        if not getattr(args, "disable_cuda_graph", False):
            captured = time.monotonic()
            log.info("Capture target decode CUDA graph begin. This can take up to several minutes.")
            await asyncio.sleep(sim.load_seconds * split.get("graphs", 0.0))
            log.info("Capture target decode CUDA graph end. elapsed=%.2f s, mem usage=0.50 GB.", time.monotonic() - captured)
        if node is not None:
            await node.loaded()
            if node.rank > 0:
                runner = await health_only(args)
        server.ready = True
        log.info("The server is fired up and ready to roll!")
        await (node.watch() if node is not None else asyncio.Event().wait())
    finally:
        if node is not None:
            node.close()
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    # To stderr, as SGLang's own basicConfig: line by line into the journal, each line stamped when logged.
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", stream=sys.stderr)
    argv = with_config_file(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)  # exits 2 like SGLang on a bad flag
    if not args.model_path:
        build_parser().error("the following arguments are required: --model-path")
    resolved = ServerArgs(vars(args))  # SGLang's own argument checks, before the model (sglang/srt/server_args.py)
    resolved.resolve_once()
    resolved.check_server_args()
    if not (Path(args.model_path) / "config.json").is_file():
        raise OSError(f"{args.model_path} does not appear to have a file named config.json.")
    sim = simulation.load()
    shown = {k: ("<set>" if k.endswith("api_key") else v) for k, v in vars(args).items() if v not in (None, False)}
    log.info("server_args=%s", json.dumps(shown))
    started = time.monotonic()
    try:
        asyncio.run(serve(args, sim))
    except KeyboardInterrupt:
        log.info("stopped after %.1f s", time.monotonic() - started)
    except (rendezvous.RendezvousError, rendezvous.PeerLost) as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
