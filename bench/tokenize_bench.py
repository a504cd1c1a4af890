#!/usr/bin/env python3
"""Tokenizer speed: plumb against llama.cpp (llama-cpp-python 0.3.36) on the same text.

Builds 1 MiB of mixed text (English prose from testdata/golden/corpus.txt, code, CJK,
emoji, numbers; deterministic), plus three 1 MiB strings without a single space, and for
each shipped model tokenizes each text with add_special=false, parse_special=false:
first with llama.cpp (one llama_tokenize call into a buffer large enough, on this
process's thread), then with plumb (crates/tokenizer/examples/tokenize_bench.rs), never
both at once, both pinned to the same CPU. Checks that the ids are identical and prints
the best of REPEATS runs for each and the ratio.

Needs: llama-cpp-python==0.3.36 and numpy; the models in the plumb cache (plumb pull all).
usage (from the repository root): python3 bench/tokenize_bench.py [--repeats N] [--cpu C] [--models m1,m2]
"""
import argparse
import ctypes
import json
import os
import platform
import random
import subprocess
import tempfile
import time

import llama_cpp
import numpy as np

MIB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.environ.get("PLUMB_MODELS", os.path.expanduser("~/.cache/plumb/models"))
TESTDATA = os.environ.get("PLUMB_SHARED") or os.path.join(ROOT, "testdata")

CODE = [
    '''def fib(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


if __name__ == "__main__":
    print([fib(i) for i in range(20)])
''',
    '''fn main() {
    let v: Vec<u64> = (1..=10).map(|x| x * x).collect();
    println!("{:?} sum={}", v, v.iter().sum::<u64>());
    match std::env::args().nth(1) {
        Some(arg) if arg.starts_with("--") => eprintln!("flag: {arg}"),
        _ => {}
    }
}
''',
    '''#include <stdio.h>
int main(int argc, char **argv) {
    for (int i = 0; i < argc; ++i) {
        printf("%d: %s\\n", i, argv[i]);  /* echo the arguments */
    }
    return argc > 1 ? 0 : 1;
}
''',
    '''SELECT name, COUNT(*) AS n FROM users WHERE created_at >= '2024-01-01' GROUP BY name HAVING n > 3 ORDER BY n DESC;
{"id": 42, "tags": ["a", "b"], "ok": true, "score": 3.14159, "nested": {"x": null}}
''',
]
CJK = [
    "東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。",
    "北京是中华人民共和国的首都，也是全国的政治和文化中心。",
    "서울은 대한민국의 수도이며 한강을 따라 펼쳐진 큰 도시입니다.",
    "今日はいい天気ですね。散歩に行きましょうか？",
    "机器学习模型需要大量的数据进行训练。",
]
EMOJI = ["😀", "🎉", "👍🏽", "❤️", "🇫🇷", "🚀", "🤖", "👨‍👩‍👧‍👦", "✨", "🔥"]


def mixed_text(seed=2024):
    """1 MiB (at most; cut at a character boundary) of mixed text, the same on every run."""
    rng = random.Random(seed)
    with open(os.path.join(TESTDATA, "golden", "corpus.txt"), encoding="utf-8") as f:
        prose = [p.strip() for p in f.read().split("\n\n") if p.strip()]
    parts, size = [], 0
    while size < MIB:
        kind = rng.random()
        if kind < 0.45:
            part = rng.choice(prose)
        elif kind < 0.70:
            part = rng.choice(CODE)
        elif kind < 0.85:
            part = " ".join(rng.choice(CJK) for _ in range(rng.randint(1, 4)))
        elif kind < 0.93:
            part = " ".join(f"{rng.randint(0, 10**rng.randint(1, 9))}" + rng.choice(["", ".5", ",000", "%", " km", "e-3"])
                            for _ in range(rng.randint(5, 30)))
        else:
            part = "Emoji time " + " ".join(rng.choice(EMOJI) * rng.randint(1, 3) for _ in range(rng.randint(3, 12)))
        parts.append(part + "\n\n")
        size += len(parts[-1].encode("utf-8"))
    data = "".join(parts).encode("utf-8")[:MIB]
    return data.decode("utf-8", errors="ignore").encode("utf-8")


TEXTS = {
    "mixed 1 MiB": mixed_text,
    "no spaces: 'a' x 1 MiB": lambda: b"a" * MIB,
    "no spaces: letters": lambda: b"Thequickbrownfox" * (MIB // 16),
    "no spaces: CJK": lambda: ("日本語のテキスト中文" * (MIB // 30)).encode("utf-8"),
}


def time_llama(path, data, repeats):
    model = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(model.model)
    capacity = len(data) + 16
    buf = (llama_cpp.llama_token * capacity)()
    seconds = []
    n = 0
    for _ in range(repeats):
        start = time.perf_counter()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, capacity, False, False)
        seconds.append(time.perf_counter() - start)
    assert n >= 0
    return seconds, np.frombuffer(bytes(buf)[: 4 * n], dtype="<i4").astype(np.uint32)


def time_plumb(exe, path, data, repeats):
    with tempfile.TemporaryDirectory() as tmp:
        text_file, ids_file = os.path.join(tmp, "text"), os.path.join(tmp, "ids")
        with open(text_file, "wb") as f:
            f.write(data)
        out = subprocess.run([exe, path, text_file, str(repeats), ids_file], check=True,
                             capture_output=True, text=True).stdout
        result = json.loads(out)
        ids = np.fromfile(ids_file, dtype="<u4")
    return result["seconds"], ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cpu", type=int, default=0, help="the CPU both run on")
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m,qwen2.5-coder-0.5b")
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.cpu})  # inherited by the plumb process
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "plumb-tokenizer", "--example", "tokenize_bench"],
                   cwd=ROOT, check=True)
    exe = os.path.join(target, "release", "examples", "tokenize_bench")

    print(f"# {platform.node()}: {platform.processor() or platform.machine()}, pinned to CPU {args.cpu}, "
          f"best of {args.repeats}; load average {os.getloadavg()[0]:.2f}")
    print("| model | text | bytes | tokens | llama.cpp (s) | plumb (s) | llama.cpp / plumb |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in args.models.split(","):
        path = os.path.join(MODELS_DIR, f"{name}.gguf")
        for label, make in TEXTS.items():
            data = make()
            llama_s, llama_ids = time_llama(path, data, args.repeats)
            plumb_s, plumb_ids = time_plumb(exe, path, data, args.repeats)
            if not np.array_equal(llama_ids, plumb_ids):
                raise SystemExit(f"{name}, {label}: plumb's ids differ from llama.cpp's")
            best_llama, best_plumb = min(llama_s), min(plumb_s)
            print(f"| {name} | {label} | {len(data)} | {len(plumb_ids)} | {best_llama:.3f} | {best_plumb:.3f} | "
                  f"{best_llama / best_plumb:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
