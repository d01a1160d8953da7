#!/usr/bin/env python3
"""Serving soak: mixed traffic against `flashseek serve` for a fixed time, then a leak and state-memory audit.

Traffic (closed loop, --concurrency workers): chat and completions, streaming and not, random lengths; a share of
clients disconnect at random points (--cancel-rate) and a share send invalid requests (--bad-rate). Every 10 s the
server's RSS, thread count, open fds and state-memory gauges are sampled. At the end the server must be idle with
zero blocks and sequences held and consistent accounting (the exact audit), and RSS must be back near the level
measured after warm-up (growth below --max-rss-growth-mb).

Usage: scripts/soak.py --minutes 10 [--bin build/tools/flashseek/flashseek] [--model DIR] [--record docs/perf.md]
Without --model it uses the tiny test model of tests/server (generated on first use). Exit code 0 = pass.
Only loopback traffic; the loop is bounded by --minutes.
"""
import argparse
import json
import os
import random
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
from conftest import Server, post_json, sse_events, http_request, tiny_model_dir  # noqa: E402

BAD_BODIES = [
    {"model": "tiny", "messages": [], "max_tokens": 4},
    {"model": "tiny", "prompt": [-1], "max_tokens": 4},
    {"model": "tiny", "prompt": "x", "max_tokens": 0},
    {"model": "tiny", "prompt": "x", "temperature": -1},
    {"model": "tiny", "prompt": "x", "n": 1000000000, "temperature": 1},
    {"model": "tiny", "prompt": "x", "max_tokens": 10 ** 7},
    {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "top_p": 0},
]


def proc_stats(pid):
    rss = threads = 0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, threads, fds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--bin", help="flashseek binary (default: FLASHSEEK_BIN or build*/tools/flashseek/flashseek)")
    ap.add_argument("--model", help="model directory (default: the tiny server test model)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--cancel-rate", type=float, default=0.10)
    ap.add_argument("--bad-rate", type=float, default=0.05)
    ap.add_argument("--max-rss-growth-mb", type=float, default=20)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--record", help="append a 'Serving soak' section with the results to this markdown file")
    ap.add_argument("--json", help="write the samples and summary as JSON here")
    args = ap.parse_args()
    if args.bin:
        os.environ["FLASHSEEK_BIN"] = os.path.abspath(args.bin)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    model = args.model or tiny_model_dir()
    srv = Server("--max-num-seqs", "16", "--max-queue", "256", model=model)
    print(f"soak: seed {seed}, {args.minutes} min, concurrency {args.concurrency}, server pid {srv.proc.pid} "
          f"port {srv.port}", flush=True)
    stop_at = time.time() + args.minutes * 60
    counts = {"ok": 0, "cancelled": 0, "bad": 0, "errors": 0}
    errors = []
    lock = threading.Lock()

    def one(r):
        kind = r.random()
        if kind < args.bad_rate:
            s, j, _ = post_json(srv.url("/v1/completions"), r.choice(BAD_BODIES))
            ok = 400 <= s < 500
            with lock:
                counts["bad" if ok else "errors"] += 1
                if not ok:
                    errors.append(("bad", s, j))
            return
        chat = r.random() < 0.5
        stream = r.random() < 0.5
        max_tokens = r.randint(4, 64)
        path = "/v1/chat/completions" if chat else "/v1/completions"
        body = {"model": "tiny", "max_tokens": max_tokens, "temperature": r.choice([0, 0.7, 1.0]), "ignore_eos": True}
        text = " ".join(r.choice(["alpha", "beta", "gamma", "δέλτα", "日本", "🙂", "x"]) for _ in range(r.randint(1, 60)))
        if chat:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if kind < args.bad_rate + args.cancel_rate:
            data = json.dumps(body).encode()
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                      f"{len(data)}\r\n\r\n".encode() + data)
            time.sleep(r.random() * 0.5)
            s.close()
            with lock:
                counts["cancelled"] += 1
            return
        try:
            if stream:
                ev = sse_events(srv, path, body)
                good = ev[-1] == "[DONE]" and ev[-2]["usage"]["completion_tokens"] == max_tokens
            else:
                s, j, _ = post_json(srv.url(path), body)
                good = s == 200 and j["usage"]["completion_tokens"] == max_tokens
                ev = j
        except Exception as e:  # noqa: BLE001 - any failure is recorded
            good, ev = False, repr(e)
        with lock:
            counts["ok" if good else "errors"] += 1
            if not good:
                errors.append((path, str(ev)[:300]))

    def worker(wseed):
        r = random.Random(wseed)
        while time.time() < stop_at:
            one(r)

    samples = []
    threads = [threading.Thread(target=worker, args=(rng.random(),)) for _ in range(args.concurrency)]
    t0 = time.time()
    for t in threads:
        t.start()
    warm_rss = None
    while any(t.is_alive() for t in threads):
        time.sleep(10)
        rss, nthreads, fds = proc_stats(srv.proc.pid)
        m = srv.metrics()
        g = lambda n: next((v for k, v in m.items() if k.split("{", 1)[0] == "flashseek:" + n), None)
        sample = {"t": round(time.time() - t0, 1), "rss_kb": rss, "threads": nthreads, "fds": fds,
                  "running": g("num_requests_running"), "waiting": g("num_requests_waiting"),
                  "used_blocks": g("state_memory_used_blocks"), **dict(counts)}
        samples.append(sample)
        if warm_rss is None and sample["t"] >= 60:
            warm_rss = rss
        print(json.dumps(sample), flush=True)
    for t in threads:
        t.join()
    audit = srv.wait_idle_and_audit(timeout=30)
    time.sleep(2)
    end_rss, end_threads, end_fds = proc_stats(srv.proc.pid)
    base_rss = warm_rss if warm_rss is not None else samples[0]["rss_kb"] if samples else end_rss
    growth_mb = (end_rss - base_rss) / 1024
    m = srv.metrics()
    summary = {
        "seed": seed, "minutes": args.minutes, "concurrency": args.concurrency, **counts,
        "rss_after_warmup_mb": round(base_rss / 1024, 1), "rss_end_mb": round(end_rss / 1024, 1),
        "rss_growth_mb": round(growth_mb, 2), "threads_end": end_threads, "fds_end": end_fds,
        "audit": audit,
        "generation_tokens": next(v for k, v in m.items() if k.startswith("flashseek:generation_tokens_total")),
        "aborted_disconnect": next(v for k, v in m.items() if k.startswith("flashseek:num_aborted_requests_total")
                                   and 'reason="client_disconnect"' in k),
    }
    code = srv.stop()
    summary["exit_code"] = code
    passed = counts["errors"] == 0 and growth_mb < args.max_rss_growth_mb and code == 0
    summary["pass"] = passed
    print("soak summary:", json.dumps(summary, indent=1))
    if errors:
        print("first errors:", errors[:5])
    if args.json:
        json.dump({"summary": summary, "samples": samples}, open(args.json, "w"), indent=1)
    if args.record:
        with open(args.record, "a") as f:
            f.write(f"\n## Serving soak ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n\n")
            f.write(f"`scripts/soak.py --minutes {args.minutes} --concurrency {args.concurrency}` (seed {seed}), "
                    f"CPU backend, tiny test model, {os.cpu_count()} cores. Mixed chat/completions, stream and not, "
                    f"{args.cancel_rate:.0%} disconnects, {args.bad_rate:.0%} invalid requests.\n\n")
            f.write("| completed | cancelled | invalid (4xx) | errors | tokens generated | RSS after 1 min | RSS at end "
                    "| growth | threads/fds at end | audit at end | result |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
            f.write(f"| {counts['ok']} | {counts['cancelled']} | {counts['bad']} | {counts['errors']} | "
                    f"{int(summary['generation_tokens'])} | {summary['rss_after_warmup_mb']} MB | "
                    f"{summary['rss_end_mb']} MB | {summary['rss_growth_mb']} MB | {end_threads}/{end_fds} | "
                    f"0 running, 0 waiting, {int(audit['state_memory_used_blocks'])} blocks, audit ok | "
                    f"{'pass' if passed else 'FAIL'} |\n")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
