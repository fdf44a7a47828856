"""The harness's token server: an OpenAI chat endpoint that streams a token every ITL milliseconds, on its own
core, so that what the harness measures is the load generator (python -m benchmarks harness serve)."""

from __future__ import annotations

import asyncio
import json
import time


def serve(port: int, itl_ms: float) -> None:
    from aiohttp import web

    itl = itl_ms / 1000.0

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        count = int(body.get("max_tokens", 16))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        deadline = time.monotonic()
        chunk = b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": "tok "}}]}).encode() + b"\n\n"
        usage = {"prompt_tokens": 8, "completion_tokens": count, "total_tokens": count + 8}
        try:
            for _ in range(count):
                delay = deadline - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await response.write(chunk)
                deadline += itl
            await response.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionError, OSError):
            pass  # the client stopped reading (its level ended): nothing to report
        return response

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)
