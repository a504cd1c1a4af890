#!/usr/bin/env python3
"""Load on an OpenAI-compatible server: N concurrent streaming clients for a while.

Each client sends `POST /v1/completions` with `stream: true` in a loop until the duration is
over (it finishes the request in flight), with prompts of mixed lengths that share no prefix
(each starts at its own place in a made-up text), replies of exactly --max-tokens tokens
(`ignore_eos`), and reads the server-sent events as they come. It records per request the
time to first token, the gaps between tokens, the tokens received and whether the stream was
complete (a finish_reason and `data: [DONE]`), and prints a JSON summary:

- generated tokens/s: all clients' tokens over the wall time of the run;
- time to first token and inter-token latency, p50 and p99 over all requests and gaps;
- failed requests (an HTTP error, an error event, a broken connection) and incomplete
  streams.

Plain asyncio, no packages: it runs wherever python3 does, and against plumb serve and
llama-server alike.

    python3 bench/serve_load.py --url http://127.0.0.1:8080 --clients 8 --duration 60
"""

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from urllib.parse import urlparse

WORDS = (
    "the river a stone under light of old town where bridge and market meet while rain "
    "falls on quiet roofs as people walk to work in morning with bread coffee news some "
    "say that winter came early this year others remember summer long ago when children "
    "played near water and boats carried fruit from southern farms to northern cities"
).split()

def prompt_text(rng, lengths):
    n = rng.choice(lengths)
    # A random opening word sequence, so that no two prompts share a prefix.
    return " ".join(rng.choice(WORDS) for _ in range(n))


async def one_request(host, port, path, body, api_key, timeout):
    """Sends one streaming request; returns its record."""
    rec = {"ok": False, "complete": False, "tokens": 0, "ttft": None, "gaps": [], "error": None}
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n"
    )
    if api_key:
        head += f"Authorization: Bearer {api_key}\r\n"
    start = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except Exception as e:  # noqa: BLE001 - any failure to connect is a failed request
        rec["error"] = f"connect: {e}"
        return rec
    try:
        writer.write(head.encode() + b"\r\n" + payload)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout)
        status = int(status_line.split()[1]) if status_line else 0
        chunked = False
        while True:
            line = await asyncio.wait_for(reader.readline(), timeout)
            if line in (b"\r\n", b""):
                break
            if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
                chunked = True
        if status != 200:
            rec["error"] = f"HTTP {status}: {(await reader.read(2000))[:300]!r}"
            return rec
        last = None
        finished = False
        async for event in sse_events(reader, chunked, timeout):
            if event == "[DONE]":
                rec["complete"] = finished
                break
            data = json.loads(event)
            if "error" in data:
                rec["error"] = f"error event: {data['error']}"
                return rec
            if data.get("usage") and not data.get("choices"):
                rec["usage_tokens"] = data["usage"].get("completion_tokens")
            for choice in data.get("choices", []):
                text = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
                if text:
                    now = time.perf_counter()
                    if last is None:
                        rec["ttft"] = now - start
                    else:
                        rec["gaps"].append(now - last)
                    last = now
                    rec["tokens"] += 1
                if choice.get("finish_reason"):
                    finished = True
        if rec.get("usage_tokens") is not None:
            rec["tokens"] = rec["usage_tokens"]
        rec["ok"] = rec["complete"]
        if not rec["ok"] and rec["error"] is None:
            rec["error"] = "stream ended without finish_reason and [DONE]"
    except Exception as e:  # noqa: BLE001 - a broken stream is a failed request
        rec["error"] = f"{type(e).__name__}: {e}"
    finally:
        writer.close()
    return rec


async def sse_events(reader, chunked, timeout):
    """Yields the data of each server-sent event."""
    buf = b""
    while True:
        if chunked:
            size_line = await asyncio.wait_for(reader.readline(), timeout)
            if not size_line:
                return
            size = int(size_line.strip().split(b";")[0] or b"0", 16)
            if size == 0:
                return
            data = await asyncio.wait_for(reader.readexactly(size + 2), timeout)
            buf += data[:-2]
        else:
            data = await asyncio.wait_for(reader.read(65536), timeout)
            if not data:
                return
            buf += data
        while b"\n\n" in buf:
            raw, buf = buf.split(b"\n\n", 1)
            for line in raw.split(b"\n"):
                if line.startswith(b"data:"):
                    yield line[5:].strip().decode()


async def client(i, args, deadline, records):
    url = urlparse(args.url)
    rng = random.Random(args.seed * 1000 + i)
    while time.perf_counter() < deadline:
        body = {
            "prompt": prompt_text(rng, args.prompt_words),
            "max_tokens": args.max_tokens,
            "temperature": args.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
            "seed": rng.randrange(1 << 31),
        }
        if args.model:
            body["model"] = args.model
        rec = await one_request(url.hostname, url.port, "/v1/completions", body, args.api_key,
                                args.timeout)
        records.append(rec)
        if args.requests and sum(1 for _ in records) >= args.requests:
            break


def pct(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


async def main_async(args):
    records = []
    start = time.perf_counter()
    deadline = start + args.duration
    await asyncio.gather(*(client(i, args, deadline, records) for i in range(args.clients)))
    wall = time.perf_counter() - start
    ttfts = [r["ttft"] for r in records if r["ttft"] is not None]
    gaps = [g for r in records for g in r["gaps"]]
    tokens = sum(r["tokens"] for r in records if r["ok"])
    failed = [r for r in records if not r["ok"]]
    summary = {
        "clients": args.clients,
        "duration_s": round(wall, 2),
        "requests": len(records),
        "failed": len(failed),
        "incomplete_streams": sum(1 for r in records if not r["complete"]),
        "generated_tokens": tokens,
        "generated_tokens_per_s": round(tokens / wall, 2),
        "ttft_p50_ms": round(1000 * pct(ttfts, 50), 1) if ttfts else None,
        "ttft_p99_ms": round(1000 * pct(ttfts, 99), 1) if ttfts else None,
        "itl_p50_ms": round(1000 * pct(gaps, 50), 1) if gaps else None,
        "itl_p99_ms": round(1000 * pct(gaps, 99), 1) if gaps else None,
        "itl_mean_ms": round(1000 * statistics.mean(gaps), 1) if gaps else None,
        "errors": sorted({r["error"] for r in failed if r["error"]})[:5],
    }
    return summary


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--duration", type=float, default=60.0, help="seconds to keep sending")
    p.add_argument("--requests", type=int, default=0, help="stop after this many requests in all")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--prompt-words", default="16,64,192,400",
                   help="prompt lengths in words, picked at random per request")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--model", default=None)
    p.add_argument("--api-key", default=None)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds without data before a request fails")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    args.prompt_words = [int(w) for w in args.prompt_words.split(",")]
    summary = asyncio.run(main_async(args))
    json.dump(summary, sys.stdout, indent=1)
    print()
    sys.exit(1 if summary["failed"] else 0)


if __name__ == "__main__":
    main()
