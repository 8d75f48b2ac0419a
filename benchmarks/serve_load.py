"""Load test of `mmtune serve`: N requests, C at a time, through the official openai client over HTTP on
127.0.0.1; latency percentiles and tokens/s, with dynamic batching and without (--max-batch 1).

The server is the real command (`mmtune serve TARGET --port P`) in its own process, so client and server do
not share an interpreter. Every answer is exactly --max-tokens long (`ignore_eos`, vLLM's extension, which
the server accepts) so tokens/s compares like with like. Half the requests carry an image (a data URL).

    python benchmarks/serve_load.py [--target tiny/qwen2-vl] [--requests 200] [--concurrency 16]
        [--max-tokens 16] [--max-batch 8] [--window-ms 10] [--repeats 3] [--out benchmarks/results/NAME.json]

`--repeats`: the two servers alternate that many times (a shared machine's load moves between runs); each
run is kept with the load average before and after it, and the median run of each is printed. The results
file holds the provenance of benchmarks/_provenance.py (commit, command, versions, machine, load).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _provenance import dumps, provenance, write_results  # noqa: E402

RESULT_KEYS = ("target", "requests", "concurrency", "repeats", "max_tokens", "window_ms", "results")


def _image_url(i: int) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64 + 8 * (i % 4), 64), (40 * (i % 6), 120, 200)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _messages(i: int) -> list[dict]:
    text = f"Question {i}: how many circles are there?"
    if i % 2:
        return [{"role": "user", "content": text}]
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": _image_url(i)}},
                                         {"type": "text", "text": text}]}]


def _start_server(target: str, port: int, max_batch: int, window_ms: float, max_pending: int):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "mmtune.cli", "serve", target, "--port", str(port), "--max-batch", str(max_batch),
           "--batch-window-ms", str(window_ms), "--max-pending", str(max_pending), "--served-model-name", "bench"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    import httpx

    deadline = time.monotonic() + 300
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {proc.stderr.read()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("the server did not start in 300 s")
        time.sleep(0.5)


async def _load(url: str, n: int, concurrency: int, max_tokens: int) -> dict:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
    sem = asyncio.Semaphore(concurrency)
    latencies, tokens, errors = [], 0, []

    async def one(i: int):
        nonlocal tokens
        async with sem:
            t0 = time.perf_counter()
            try:
                r = await client.chat.completions.create(model="bench", messages=_messages(i), max_tokens=max_tokens,
                                                         extra_body={"ignore_eos": True})
            except Exception as e:  # noqa: BLE001 - a failed request is counted and reported, the run goes on
                errors.append(f"{type(e).__name__}: {e}")
                return
            latencies.append(time.perf_counter() - t0)
            tokens += r.usage.completion_tokens

    # One warm-up request (first-call costs: lazy imports, allocator growth) outside the measurement.
    await client.chat.completions.create(model="bench", messages=_messages(0), max_tokens=2)
    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - t0
    await client.close()
    lat = sorted(latencies)

    def pct(p):
        return round(lat[min(len(lat) - 1, int(p / 100 * len(lat)))], 4) if lat else None

    return {"requests": n, "ok": len(lat), "errors": len(errors), "first_errors": errors[:3], "wall_s": round(wall, 2),
            "requests_per_s": round(len(lat) / wall, 2), "completion_tokens": tokens,
            "tokens_per_s": round(tokens / wall, 1), "latency_s": {"p50": pct(50), "p90": pct(90), "p99": pct(99),
                                                                   "max": round(lat[-1], 4) if lat else None}}


def _print(label: str, r: dict) -> None:
    lat = r["latency_s"]
    print(f"{label:18s} max_batch={r['max_batch']}: {r['ok']}/{r['requests']} ok, {r['requests_per_s']} req/s, "
          f"{r['tokens_per_s']} tok/s, latency p50 {lat['p50']} s  p90 {lat['p90']} s  p99 {lat['p99']} s, "
          f"{r['server']['batches']} generate calls (largest {r['server']['largest_batch']}), "
          f"load {r['loadavg_1min'][0]}->{r['loadavg_1min'][1]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="tiny/qwen2-vl")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--window-ms", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", help="write the results (JSON) here")
    args = ap.parse_args()
    started = provenance()
    from mmtune.serve.server import free_port

    runs: dict[str, list] = {"batched": [], "one_by_one": []}
    for _ in range(args.repeats):
        for label, max_batch in (("batched", args.max_batch), ("one_by_one", 1)):
            port = free_port()
            proc = _start_server(args.target, port, max_batch, args.window_ms, max_pending=max(64, args.concurrency))
            try:
                url = f"http://127.0.0.1:{port}"
                load_before = os.getloadavg()[0]
                r = asyncio.run(_load(url, args.requests, args.concurrency, args.max_tokens))
                import httpx

                r["server"] = httpx.get(url + "/health").json()["stats"]
                r["max_batch"] = max_batch
                r["loadavg_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
            finally:
                proc.terminate()
                proc.wait(timeout=60)
            runs[label].append(r)
            _print(label, r)
    results = {}
    for label, rs in runs.items():  # the run with the median throughput, and every run
        med = sorted(rs, key=lambda r: r["tokens_per_s"])[(len(rs) - 1) // 2]
        results[label] = {**med, "runs": rs}
        _print(f"median {label}", med)
    report = {"target": args.target, "requests": args.requests, "concurrency": args.concurrency,
              "repeats": args.repeats,
              "max_tokens": args.max_tokens, "window_ms": args.window_ms, "results": results}
    if args.out:
        print(f"written: {write_results(args.out, report, started)}")
    else:
        print(dumps(report, started))


if __name__ == "__main__":
    main()
