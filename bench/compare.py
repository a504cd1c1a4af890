#!/usr/bin/env python3
"""plumb bench against llama.cpp (through llama-cpp-python), side by side, same model files.

For each model, runs `plumb bench --json` and then the same tests in llama.cpp, one after the
other (never at once: on a small machine their spinning threads would slow each other down),
and prints plumb's tokens/s, llama.cpp's, and the ratio plumb / llama.cpp for every test.

llama.cpp is measured the way llama-bench measures: ppN evaluates N tokens from an empty
context in batches of 512 with logits for the last token only, tgN decodes N tokens one at a
time from an empty context; one warm-up run, then the mean ± stddev of --repetitions runs.
llama.cpp runs with flash attention off and on (its f16 KV cache in both), and the faster of
the two is the peer: plumb is compared with llama.cpp at its best on this machine.

    python3 bench/compare.py --threads 2 -p 512 -n 128 -r 3 --append docs/benchmarks.md

Needs llama-cpp-python==0.3.36 (pip-installed, built from source) and the models in plumb's
cache (`plumb pull all`).
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"]


def models_dir():
    env = os.environ.get("PLUMB_MODELS")
    return Path(env) if env else Path.home() / ".cache" / "plumb" / "models"


def plumb_bench(plumb, model_path, threads, n_prompt, n_gen, reps):
    cmd = [str(plumb), "bench", "-m", str(model_path), "-t", str(threads),
           "-p", str(n_prompt), "-n", str(n_gen), "-r", str(reps), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {row["test"]: row for row in json.loads(out)}, " ".join(cmd[1:])


def llama_cpp_bench(model_path, threads, n_prompt, n_gen, reps, flash_attn):
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=str(model_path), n_ctx=max(n_prompt, n_gen, 1), n_batch=512, n_ubatch=512,
        n_threads=threads, n_threads_batch=threads, flash_attn=flash_attn, verbose=False,
    )
    n_vocab = llm.n_vocab()
    token = lambda i: (i * 2654435761) % n_vocab

    def measure(n, run):
        rates = []
        for rep in range(reps + 1):
            llm.reset()
            start = time.perf_counter()
            run()
            rate = n / (time.perf_counter() - start)
            if rep > 0:  # the first run warms up
                rates.append(rate)
        return rates

    results = {}
    if n_prompt > 0:
        tokens = [token(i) for i in range(n_prompt)]
        results[f"pp{n_prompt}"] = measure(n_prompt, lambda: llm.eval(tokens))
    if n_gen > 0:
        def generate():
            for i in range(n_gen):
                llm.eval([token(i)])
        results[f"tg{n_gen}"] = measure(n_gen, generate)
    del llm
    return results


def machine_description():
    model = "unknown"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    flags = set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    simd = [f for f in ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                        "avx512_bf16", "avx_vnni"] if f in flags]
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{model}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, {platform.system()} {platform.machine()}, SIMD: {' '.join(simd)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-r", "--repetitions", type=int, default=3)
    ap.add_argument("--plumb", default=str(ROOT / "target" / "release" / "plumb"))
    ap.add_argument("--append", metavar="MARKDOWN", help="append the results to this file")
    args = ap.parse_args()

    import llama_cpp
    rows = []
    plumb_cmds = []
    for name in args.models.split(","):
        path = models_dir() / f"{name}.gguf"
        if not path.exists():
            sys.exit(f"{path} is missing: run `plumb pull {name}` first")
        ours, cmd = plumb_bench(args.plumb, path, args.threads, args.n_prompt, args.n_gen, args.repetitions)
        plumb_cmds.append(cmd)
        peers = {fa: llama_cpp_bench(path, args.threads, args.n_prompt, args.n_gen, args.repetitions, fa)
                 for fa in (False, True)}
        for test, row in ours.items():
            best_fa = max(peers, key=lambda fa: statistics.mean(peers[fa][test]))
            theirs = peers[best_fa][test]
            mean, sd = statistics.mean(theirs), statistics.stdev(theirs) if len(theirs) > 1 else 0.0
            rows.append((name, test, args.threads, row["avg_ts"], row["stddev_ts"], mean, sd,
                         "on" if best_fa else "off", row["avg_ts"] / mean, row.get("peak_rss_bytes")))

    header = "| model | test | threads | plumb t/s | llama.cpp t/s | llama.cpp FA | plumb / llama.cpp | plumb peak RSS |"
    lines = [header, "|---|---|---:|---:|---:|:---:|---:|---:|"]
    for (name, test, threads, ours, ours_sd, theirs, theirs_sd, fa, ratio, rss) in rows:
        rss = f"{rss / 2**20:.0f} MiB" if rss else "n/a"
        lines.append(f"| {name} | {test} | {threads} | {ours:.2f} ± {ours_sd:.2f} | {theirs:.2f} ± {theirs_sd:.2f} | {fa} | {ratio:.2f} | {rss} |")
    table = "\n".join(lines)
    print(table)

    if args.append:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        today = datetime.date.today().isoformat()
        # A capped instruction set changes what plumb runs: the section must say so.
        cap = os.environ.get("PLUMB_CPU_ISA")
        env = f"PLUMB_CPU_ISA={cap} " if cap else ""
        capped = f", plumb capped at PLUMB_CPU_ISA={cap}" if cap else ""
        section = f"""
### plumb vs llama.cpp, {today} (plumb {commit}, llama-cpp-python {llama_cpp.__version__}{capped})

**Machine:** {machine_description()}.

**Command:** `{env}python3 bench/compare.py --models {args.models} --threads {args.threads} -p {args.n_prompt} -n {args.n_gen} -r {args.repetitions} --append docs/benchmarks.md`
(plumb side: `{env}plumb {plumb_cmds[0]}` and likewise for each model.)

{table}
"""
        with open(args.append, "a") as f:
            f.write(section)
        print(f"appended to {args.append}")


if __name__ == "__main__":
    main()
