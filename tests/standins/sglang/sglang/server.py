"""STAND-IN for SGLang's HTTP API (rehearsal tests only), streaming tokens on a known clock.

Each request's inter-token time is base_itl(layout) + slope x running requests,
never shorter than running / peak(layout) (the decode roofline), scheduled on
absolute deadlines so the rate does not drift; at most max-running-requests
decode at once and the rest queue; with ignore_eos a request decodes exactly
its max tokens. Token counts in usage / meta_info are
the server's own, as in SGLang.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import time
import uuid
from collections.abc import AsyncIterator

from aiohttp import web

from sglang import __version__
from sglang.simulation import Simulation, active_effects, factor, host_settings

TOKEN = " tok"
# SGLang's open paths; /standin/load (STAND-IN only, counts and no secret) is what its nvidia-smi reads.
OPEN_PATHS = ("/health", "/health_generate", "/ready", "/metrics", "/standin/load")


class Server:
    def __init__(self, args: object, sim: Simulation) -> None:
        self.args = args
        self.sim = sim
        self.ready = False
        self.running = 0
        self.generated_total = 0
        # Ground truth for benchmark tests: when each token left the server (CLOCK_MONOTONIC, which
        # the client on the same kernel shares). Bounded so a long run cannot grow it without limit.
        self.emitted: collections.deque[float] = collections.deque(maxlen=2_000_000)
        self.recent: list[float] = []  # completion times of tokens in the last second, for gen_throughput
        self.model_name = args.served_model_name or args.model_path
        sizes = [int(getattr(args, f"{k}_size") or 1) for k in ("tp", "ep", "pp", "dp")]
        self.base_itl = sim.base_itl_ms(*sizes) / 1000.0
        self.peak = sim.peak(*sizes)
        layout_key = "tp{}-ep{}-pp{}-dp{}".format(*sizes)
        # Its GPUs as the stand-in nvidia-smi counts them: CUDA_VISIBLE_DEVICES, else the first tp x pp x dp.
        world = sizes[0] * sizes[2] * sizes[3]
        visible = [int(part) for part in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if part.strip().isdigit()]
        self.host = host_settings(sim, (visible or list(range(sim.gpu_count)))[:world])
        self.effects = active_effects(sim.effects, args, os.environ, layout_key, self.host)  # the knobs it runs with
        # A hang (the simulation's hang_above, unless a knob it runs with cures it): once more requests than that
        # decode at once, no token leaves the server again, for any request.
        cured = any(effect.get("cures_hang") for effect in self.effects)
        self.hangs_at = 0 if cured else int(sim.hang_above.get(layout_key, sim.hang_above.get("default", 0)))
        self.hung = False
        cap = int(getattr(args, "max_running_requests", None) or sim.max_running_requests or 0)
        self.slots = asyncio.Semaphore(cap) if cap > 0 else None
        self.queued = 0
        # The KV cache in tokens: SGLang's --max-total-tokens (its memory pool), else the simulation's (0: unbounded).
        self.kv_tokens = int(getattr(args, "max_total_tokens", None) or sim.kv_tokens or 0)
        self.kv_used = 0  # tokens the decoding requests hold
        self.retracted_total = 0
        self.sizes = dict(zip(("tp", "ep", "pp", "dp"), sizes, strict=True))
        self.flushes = 0  # /flush_cache calls, reported on /standin/emitted for tests
        self.arrivals: collections.deque[float] = collections.deque(maxlen=2_000_000)  # when each request came in
        self.prompts: collections.deque[str] = collections.deque(maxlen=10_000)  # what each asked, as text
        # Per streamed request, each chunk's [send time, cumulative tokens]: the truth for a client's per-request
        # rate and inter-token times when a loaded machine makes the server itself late against its clock.
        self.streams: collections.deque[list[list[float]]] = collections.deque(maxlen=20_000)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth])
        get, post = app.router.add_get, app.router.add_post
        get("/health", self.health)
        get("/health_generate", self.health)
        get("/ready", self.ready_route)
        get("/model_info", self.model_info)
        get("/get_model_info", self.model_info)
        get("/server_info", self.server_info)
        get("/get_server_info", self.server_info)
        get("/v1/models", self.models)
        get("/metrics", self.metrics)
        get("/standin/emitted", self.emitted_route)
        get("/standin/load", self.load_route)
        post("/generate", self.generate)
        post("/v1/chat/completions", self.chat)
        post("/v1/completions", self.completions)
        get("/flush_cache", self.flush_cache)
        post("/flush_cache", self.flush_cache)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: object) -> web.StreamResponse:
        key = self.args.api_key
        if key and not request.path.startswith(OPEN_PATHS) and request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        if request.path == "/metrics" and not self.args.enable_metrics:
            return web.Response(status=404)
        return await handler(request)

    # --- the token clock -------------------------------------------------
    def itl(self) -> float:
        itl = (self.base_itl + self.sim.itl_slope_ms / 1000.0 * self.running) * factor(self.effects, "itl_factor", self.running)
        if not self.peak:
            return itl
        return max(itl, self.running / (self.peak * factor(self.effects, "peak_factor", self.running)))

    async def tokens(self, count: int) -> AsyncIterator[int]:
        """Yield the cumulative count up to `count` on schedule, step by step (after a queue wait)."""
        if self.slots is None:
            async for index in self._decode(count):
                yield index
            return
        self.queued += 1
        try:
            await self.slots.acquire()
        finally:
            self.queued -= 1
        try:
            async for index in self._decode(count):
                yield index
        finally:
            self.slots.release()

    def _steps(self, count: int) -> list[int]:
        """Tokens per decode step: one, or with a speculative draft the simulation's accepted lengths in turn."""
        if not getattr(self.args, "speculative_algorithm", None):
            return [1] * count
        pattern = [max(int(n), 1) for n in self.sim.speculative_accept] or [1]
        steps, made = [], 0
        while made < count:
            size = min(pattern[len(steps) % len(pattern)], count - made)
            steps.append(size)
            made += size
        return steps

    async def _room(self, tokens: int) -> None:
        """Wait until the KV cache holds `tokens` more (SGLang's retracted request waiting to be scheduled again)."""
        while self.kv_used + tokens > self.kv_tokens:
            await asyncio.sleep(0.005)

    async def _decode(self, count: int) -> AsyncIterator[int]:
        """The cumulative token count after each decode step, on absolute deadlines: the first step after the
        prefill, each next one an inter-token time later (x the speculative step factor, with a draft). With a
        bounded KV cache, a step that does not fit retracts the request: its tokens are given back, and once
        there is room again it holds them anew after a fresh prefill."""
        self.running += 1
        step_factor = self.sim.speculative_step_factor if getattr(self.args, "speculative_algorithm", None) else 1.0
        held = 0
        try:
            if self.kv_tokens:
                await self._room(self.sim.kv_prompt_tokens)
                held = self.sim.kv_prompt_tokens
                self.kv_used += held
            deadline = time.monotonic() + self.sim.prefill_ms / 1000.0
            made = 0
            for size in self._steps(count):
                if self.kv_tokens and self.kv_used + size > self.kv_tokens:
                    # Retracted: back to the queue, its tokens given back until it fits again.
                    self.retracted_total += 1
                    released, held = held, 0
                    self.kv_used -= released
                    self.running -= 1
                    self.queued += 1
                    try:
                        await self._room(released + size)
                    finally:
                        self.queued -= 1
                        self.running += 1
                    held = released
                    self.kv_used += held
                    deadline = time.monotonic() + self.sim.prefill_ms / 1000.0
                if self.kv_tokens:
                    held += size
                    self.kv_used += size
                delay = deadline - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if self.hangs_at and self.running > self.hangs_at:  # as an NCCL hang: no token for anyone, ever
                    self.hung = True
                if self.hung:
                    await asyncio.Event().wait()
                made += size
                self.generated_total += size
                now = time.monotonic()
                self.recent.extend([now] * size)
                self.emitted.extend([now] * size)
                yield made
                deadline += self.itl() * step_factor
        finally:
            self.running -= 1
            self.kv_used -= held

    async def chunks(self, count: int) -> AsyncIterator[int]:
        """The cumulative token count at each chunk sent: every `stream_interval` tokens and at the end.

        As SGLang's --stream-interval: a chunk carries several tokens when the server streams less often
        than every token (the simulation's stream_interval when the flag is not given), or when a
        speculative step accepted several.
        """
        interval = max(int(self.args.stream_interval or self.sim.stream_interval), 1)
        sent: list[list[float]] = []
        last = 0
        async for n in self.tokens(count):
            if n // interval > last // interval or n == count:
                sent.append([time.monotonic(), n])
                last = n
                if n == count:
                    self.streams.append(sent)
                yield n

    def _count(self, max_tokens: object, ignore_eos: bool) -> int:
        wanted = int(max_tokens) if max_tokens is not None else 128
        return wanted if ignore_eos else min(wanted, self.sim.eos_after)

    # --- routes ----------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        if not self.ready:
            return web.Response(status=503, text="loading")
        async for _ in self.tokens(1):
            pass
        return web.Response(status=200)

    async def ready_route(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready else 503)

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"model_path": self.args.model_path, "tokenizer_path": self.args.model_path, "is_generation": True, "standin": True}
        )

    async def server_info(self, request: web.Request) -> web.Response:
        # As the real 0.5.23 does: the server args as a dict, keys included, to an authenticated client.
        return web.json_response({**vars(self.args), "version": __version__, "standin": True})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model_name,
                        "object": "model",
                        "owned_by": "sglang",
                        "max_model_len": int(self.args.context_length or 4096),
                    }
                ],
            }
        )

    async def metrics(self, request: web.Request) -> web.Response:
        now = time.monotonic()
        self.recent = [t for t in self.recent if now - t <= 1.0]
        label = f'{{model_name="{self.model_name}"}}'
        body = (
            "# TYPE sglang:gen_throughput gauge\n"
            f"sglang:gen_throughput{label} {float(len(self.recent))}\n"
            "# TYPE sglang:num_running_reqs gauge\n"
            f"sglang:num_running_reqs{label} {float(self.running)}\n"
            "# TYPE sglang:num_queue_reqs gauge\n"
            f"sglang:num_queue_reqs{label} {float(self.queued)}\n"
            "# TYPE sglang:generation_tokens_total counter\n"
            f"sglang:generation_tokens_total{label} {float(self.generated_total)}\n"
            "# TYPE sglang:token_usage gauge\n"
            f"sglang:token_usage{label} {self.kv_used / self.kv_tokens if self.kv_tokens else 0.0}\n"
            "# TYPE sglang:num_retracted_requests_total counter\n"
            f"sglang:num_retracted_requests_total{label} {float(self.retracted_total)}\n"
        )
        return web.Response(text=body, content_type="text/plain")

    async def load_route(self, request: web.Request) -> web.Response:
        """STAND-IN only: what its nvidia-smi needs to draw this server's GPUs: tokens/s now, the roofline, sizes."""
        now = time.monotonic()
        self.recent = [t for t in self.recent if now - t <= 1.0]
        peak = self.peak * factor(self.effects, "peak_factor", self.running) if self.peak else None
        return web.json_response({"tok_s": float(len(self.recent)), "peak_tok_s": peak, "running": self.running, **self.sizes})

    async def emitted_route(self, request: web.Request) -> web.Response:
        """STAND-IN only: when every token left, when every request came in, what it asked and when each chunk was sent."""
        return web.json_response(
            {
                "clock": "monotonic",
                "times": list(self.emitted),
                "flushes": self.flushes,
                "arrivals": list(self.arrivals),
                "prompts": list(self.prompts),
                "streams": list(self.streams),
            }
        )

    async def flush_cache(self, request: web.Request) -> web.Response:
        # As SGLang: empties the radix cache (the stand-in has none) and says so.
        self.flushes += 1
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details.")

    async def _body(self, request: web.Request) -> dict:
        self.arrivals.append(time.monotonic())
        if not self.ready:
            raise web.HTTPServiceUnavailable(text="the server is still loading")
        if self.sim.fail_requests:  # a server whose generation fails (e.g. a broken model), for error-path tests
            body = json.dumps({"object": "error", "message": "simulated failure"})
            raise web.HTTPInternalServerError(text=body, content_type="application/json")
        try:
            return await request.json()
        except json.JSONDecodeError as exc:
            raise web.HTTPBadRequest(text=f"invalid JSON: {exc}") from exc

    @staticmethod
    async def _sse(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        return response

    @staticmethod
    async def _send(response: web.StreamResponse, payload: dict | str) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        await response.write(f"data: {data}\n\n".encode())

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        params = body.get("sampling_params") or {}
        count = self._count(params.get("max_new_tokens"), bool(params.get("ignore_eos")))
        prompt_tokens = len(str(body.get("text", "")).split()) or len(body.get("input_ids") or [])
        self.prompts.append(str(body.get("text") or " ".join(map(str, body.get("input_ids") or []))))
        rid = body.get("rid") or uuid.uuid4().hex

        def chunk(n: int) -> dict:
            finish = {"type": "length", "length": n} if n == count else None
            meta = {"id": rid, "prompt_tokens": prompt_tokens, "completion_tokens": n, "finish_reason": finish}
            return {"text": TOKEN * n, "meta_info": meta, "index": 0}

        if not body.get("stream"):
            async for _ in self.tokens(count):
                pass
            return web.json_response(chunk(count))
        response = await self._sse(request)
        async for n in self.chunks(count):
            await self._send(response, chunk(n))
        await self._send(response, "[DONE]")
        return response

    async def _openai(self, request: web.Request, kind: str) -> web.StreamResponse:
        body = await self._body(request)
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        count = self._count(max_tokens, bool(body.get("ignore_eos")))
        if kind == "chat":
            prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages") or [])
            self.prompts.append("\n".join(str(m.get("content", "")) for m in body.get("messages") or []))
        else:
            prompt_tokens = len(str(body.get("prompt", "")).split())
        rid, created = f"{uuid.uuid4().hex}", int(time.time())
        obj = "chat.completion" if kind == "chat" else "text_completion"
        finish = "length" if count == (int(max_tokens) if max_tokens is not None else 128) else "stop"
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": count, "total_tokens": prompt_tokens + count}

        def choice(text: str, done: bool, stream: bool) -> dict:
            end = finish if done else None
            if kind != "chat":
                return {"index": 0, "text": text, "finish_reason": end}
            key = "delta" if stream else "message"
            return {"index": 0, key: {"role": "assistant", "content": text}, "finish_reason": end}

        if not body.get("stream"):
            async for _ in self.tokens(count):
                pass
            return web.json_response(
                {
                    "id": rid,
                    "object": obj,
                    "created": created,
                    "model": self.model_name,
                    "choices": [choice(TOKEN * count, True, False)],
                    "usage": usage,
                }
            )
        response = await self._sse(request)
        base = {"id": rid, "object": f"{obj}.chunk" if kind == "chat" else obj, "created": created, "model": self.model_name}
        options = body.get("stream_options") or {}
        running_usage = bool(options.get("continuous_usage_stats")) and self.sim.continuous_usage
        previous = 0
        async for n in self.chunks(count):
            payload = {**base, "choices": [choice(TOKEN * (n - previous), n == count, True)]}
            if running_usage:  # SGLang's continuous_usage_stats: the cumulative count on every chunk
                payload["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
            await self._send(response, payload)
            previous = n
        if (body.get("stream_options") or {}).get("include_usage"):
            await self._send(response, {**base, "choices": [], "usage": usage})
        await self._send(response, "[DONE]")
        return response

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, "completions")
