#!/usr/bin/env python3
"""Serving benchmark for a running `rill serve` (or any OpenAI-compatible server): random prompts of a fixed
token count through /v1/completions (token-id prompts, streamed), at several concurrencies; reports time to
first token, time per output token and output throughput. Standard library only.

usage: serving_bench.py --url http://127.0.0.1:8000 [--concurrency 1 16 64] [--prompt-tokens 1024]
                        [--output-tokens 256] [--requests 64] [--vocab 163584] [--markdown FILE]
"""
import argparse
import http.client
import json
import random
import statistics
import threading
import time
import urllib.parse


def one_request(url, model, prompt, max_tokens):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "min_tokens": max_tokens,
                       "ignore_eos": True, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]}")
    first, tokens = None, 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("choices") and first is None:
            first = time.perf_counter()
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
    end = time.perf_counter()
    conn.close()
    return first - start, end - first, tokens, end


def run_level(url, model, concurrency, n_requests, prompt_tokens, output_tokens, vocab, seed):
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab) for _ in range(prompt_tokens)] for _ in range(n_requests)]
    results, lock, it = [], threading.Lock(), iter(range(n_requests))

    def worker():
        while True:
            with lock:
                i = next(it, None)
            if i is None:
                return
            r = one_request(url, model, prompts[i], output_tokens)
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttft = [r[0] * 1e3 for r in results]
    tpot = [r[1] * 1e3 / max(r[2] - 1, 1) for r in results]
    out_tokens = sum(r[2] for r in results)
    return {"concurrency": concurrency, "requests": len(results), "ttft_ms_median": statistics.median(ttft),
            "ttft_ms_p90": sorted(ttft)[int(0.9 * (len(ttft) - 1))], "tpot_ms_median": statistics.median(tpot),
            "output_tokens_per_s": out_tokens / wall, "total_tokens_per_s": (out_tokens + prompt_tokens * len(results)) / wall,
            "wall_s": wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default=None)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--requests", type=int, default=0, help="per level (default: 4 x concurrency, at least 4)")
    ap.add_argument("--vocab", type=int, default=163584)
    ap.add_argument("--markdown", default=None)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("GET", "/v1/models")
    model = a.model or json.loads(conn.getresponse().read())["data"][0]["id"]
    rows = []
    for c in a.concurrency:
        n = a.requests or max(4, 4 * c)
        r = run_level(a.url, model, c, n, a.prompt_tokens, a.output_tokens, a.vocab, seed=c)
        rows.append(r)
        print(json.dumps(r), flush=True)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(f"Random {a.prompt_tokens}-token prompts, {a.output_tokens} output tokens (ignore_eos), greedy, "
                    f"streamed through /v1/completions.\n\n")
            f.write("| concurrency | requests | TTFT median (ms) | TTFT p90 (ms) | TPOT median (ms) | output tok/s | "
                    "total tok/s |\n|---:|---:|---:|---:|---:|---:|---:|\n")
            for r in rows:
                f.write(f"| {r['concurrency']} | {r['requests']} | {r['ttft_ms_median']:.1f} | {r['ttft_ms_p90']:.1f} | "
                        f"{r['tpot_ms_median']:.2f} | {r['output_tokens_per_s']:.0f} | {r['total_tokens_per_s']:.0f} |\n")


if __name__ == "__main__":
    main()
