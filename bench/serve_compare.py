#!/usr/bin/env python3
"""plumb serve against llama-server under the same load, one server at a time.

For each model and each concurrency N, starts the server with N parallel sequences, sends one
warm-up request, runs bench/serve_load.py with N streaming clients for --duration seconds,
and stops the server; then the same with the other server. Never two servers at once: on a
small machine they would share the cores. plumb's resident memory is read before the load
(after the warm-up) and after it, with its /metrics, which must show no active sequence and
no KV block in use once the load is over.

llama-server runs with `-np N`, a context of N × --ctx tokens (its context is shared by its
slots; plumb's --ctx-size is per sequence), and, as the peer at its best, each thread count
of --llama-threads (the best one is compared).

    python3 bench/serve_compare.py --llama-server PATH/llama-server \\
        --models qwen2.5-coder-0.5b --clients 1,8 --duration 60 --append docs/benchmarks.md
"""

import argparse
import datetime
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def models_dir():
    env = os.environ.get("PLUMB_MODELS")
    return Path(env) if env else Path.home() / ".cache" / "plumb" / "models"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.5)
    raise RuntimeError("server did not become healthy")


def rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        m = re.match(r"^(plumb_[a-z_]+)(\{[^}]*\})?\s+([-0-9.eE+]+)$", line)
        if m and not m.group(2):
            values[m.group(1)] = float(m.group(3))
    return values


def load(url, clients, duration, max_tokens, prompt_words="16", requests=0):
    cmd = [sys.executable, str(ROOT / "bench" / "serve_load.py"), "--url", url,
           "--clients", str(clients), "--duration", str(duration), "--max-tokens", str(max_tokens),
           "--prompt-words", prompt_words]
    if requests:
        cmd += ["--requests", str(requests)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    return json.loads(out.stdout)


def run_server(cmd, url, clients, args, plumb):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_healthy(url, proc)
        load(url, 1, 0, 8, requests=1)  # warm-up
        before = rss_mib(proc.pid)
        result = load(url, clients, args.duration, args.max_tokens, args.prompt_words)
        time.sleep(1)
        result["rss_before_mib"] = round(before, 1)
        result["rss_after_mib"] = round(rss_mib(proc.pid), 1)
        if plumb:
            m = metrics(url)
            result["after_active_sequences"] = m.get("plumb_active_sequences")
            result["after_kv_blocks_used"] = m.get("plumb_kv_blocks_used")
        return result
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="qwen2.5-coder-0.5b")
    p.add_argument("--clients", default="1,8")
    p.add_argument("--duration", type=float, default=60)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--prompt-words", default="16,64,192,400",
                   help="prompt lengths in words (see serve_load.py)")
    p.add_argument("--ctx", type=int, default=1024, help="context per sequence")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--llama-threads", default="1,2")
    p.add_argument("--llama-server", default=None, help="path to llama-server; omit to run plumb only")
    p.add_argument("--plumb", default=str(ROOT / "target" / "release" / "plumb"))
    p.add_argument("--append", default=None, help="append a markdown section to this file")
    args = p.parse_args()

    rows = []
    for model in args.models.split(","):
        path = models_dir() / f"{model}.gguf"
        for n in [int(c) for c in args.clients.split(",")]:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            cmd = [args.plumb, "serve", "-m", str(path), "--port", str(port), "-np", str(n),
                   "-c", str(args.ctx), "-t", str(args.threads)]
            plumb = run_server(cmd, url, n, args, plumb=True)
            print(json.dumps({"model": model, "server": "plumb", "n": n, **plumb}), file=sys.stderr)
            best = None
            if args.llama_server:
                for t in args.llama_threads.split(","):
                    port = free_port()
                    url = f"http://127.0.0.1:{port}"
                    cmd = [args.llama_server, "-m", str(path), "--port", str(port), "-np", str(n),
                           "-c", str(n * args.ctx), "-t", t, "-tb", t, "--no-webui"]
                    res = run_server(cmd, url, n, args, plumb=False)
                    res["threads"] = int(t)
                    print(json.dumps({"model": model, "server": "llama-server", "n": n, **res}),
                          file=sys.stderr)
                    if best is None or res["generated_tokens_per_s"] > best["generated_tokens_per_s"]:
                        best = res
            rows.append((model, n, plumb, best))

    lines = [
        "| model | clients | plumb t/s | llama-server t/s | plumb / llama-server | plumb TTFT p50 / p99 ms "
        "| plumb ITL p50 / p99 ms | llama-server TTFT p50 / p99 ms | llama-server ITL p50 / p99 ms "
        "| plumb failed / requests |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model, n, pl, ll in rows:
        ratio = f"**{pl['generated_tokens_per_s'] / ll['generated_tokens_per_s']:.2f}**" if ll else "–"
        ll_tps = f"{ll['generated_tokens_per_s']:.1f} (-t {ll['threads']})" if ll else "–"
        ll_ttft = f"{ll['ttft_p50_ms']} / {ll['ttft_p99_ms']}" if ll else "–"
        ll_itl = f"{ll['itl_p50_ms']} / {ll['itl_p99_ms']}" if ll else "–"
        lines.append(
            f"| {model} | {n} | {pl['generated_tokens_per_s']:.1f} | {ll_tps} | {ratio} "
            f"| {pl['ttft_p50_ms']} / {pl['ttft_p99_ms']} | {pl['itl_p50_ms']} / {pl['itl_p99_ms']} "
            f"| {ll_ttft} | {ll_itl} | {pl['failed']} / {pl['requests']} |"
        )
    memory = [
        f"- {model}, {n} clients: plumb RSS {pl['rss_before_mib']} MiB before the load, "
        f"{pl['rss_after_mib']} MiB after; /metrics after: {pl['after_active_sequences']:.0f} "
        f"active sequences, {pl['after_kv_blocks_used']:.0f} KV blocks used"
        for model, n, pl, _ in rows
    ]
    table = "\n".join(lines + [""] + memory)
    print(table)
    if args.append:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        section = (
            f"\n### plumb serve vs llama-server, {datetime.date.today()}\n\n"
            f"Machine: {platform.machine()}, {os.cpu_count()} cores; plumb {commit}; "
            f"{args.threads} threads for plumb; {args.max_tokens}-token replies (`ignore_eos`), "
            f"prompts of {args.prompt_words} words, {args.duration:.0f} s per run.\n\n"
            f"```\npython3 bench/serve_compare.py {' '.join(sys.argv[1:])}\n```\n\n{table}\n"
        )
        with open(args.append, "a") as f:
            f.write(section)


if __name__ == "__main__":
    main()
