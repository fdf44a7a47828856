"""A minimal asyncio streaming client (aiohttp, one shared session, reading the body line by line the way
SGLang's bench_serving reads streams), as a yardstick for the Locust harness. Same records as the locustfile.

    python -m benchmarks.asyncio_client --url URL --concurrency C --requests N --output-tokens T --records FILE
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import aiohttp

from benchmarks.records import RequestRecord, phase_of


async def one_request(session: aiohttp.ClientSession, url: str, body: bytes, record: RequestRecord) -> None:
    try:
        async with session.post(url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}) as answer:
            if answer.status != 200:
                record.error = f"HTTP {answer.status}"
            async for line in answer.content:
                if not line.startswith(b"data: {"):
                    continue
                now = time.monotonic()
                event = json.loads(line[6:])
                choices = event.get("choices") or []
                if choices and (choices[0].get("delta") or {}).get("content"):
                    record.chunk_times.append(now)
                    record.chunk_tokens.append(1)
                if event.get("usage"):
                    record.output_tokens = event["usage"].get("completion_tokens")
    except (aiohttp.ClientError, OSError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    record.end = time.monotonic()
    record.ok = not record.error and bool(record.chunk_times)


async def run(url: str, concurrency: int, requests: int, warmup: int, output_tokens: int) -> list[RequestRecord]:
    body = json.dumps(
        {
            "model": "default",
            "messages": [{"role": "user", "content": "hello " * 8}],
            "max_tokens": output_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    records: list[RequestRecord] = []
    counter = {"sent": 0, "measured_done": 0}
    done = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:

        async def user() -> None:
            while not done.is_set():
                index = counter["sent"]
                counter["sent"] += 1
                phase = phase_of(index, warmup, requests)
                record = RequestRecord(level=concurrency, phase=phase, sent=time.monotonic(), requested_tokens=output_tokens)
                await one_request(session, url, body, record)
                records.append(record)
                if phase == "measured":
                    counter["measured_done"] += 1
                    if counter["measured_done"] == requests:
                        done.set()

        tasks = [asyncio.create_task(user()) for _ in range(concurrency)]
        await done.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=-1)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--records", required=True)
    args = parser.parse_args()
    warmup = args.warmup if args.warmup >= 0 else args.concurrency
    records = asyncio.run(run(args.url, args.concurrency, args.requests, warmup, args.output_tokens))
    with open(args.records, "w") as out:
        out.writelines(json.dumps({"type": "request", **record.to_dict()}) + "\n" for record in records)


if __name__ == "__main__":
    main()
