"""Shared fixtures for the server end-to-end tests: a tiny random DeepSeek-V4 checkpoint with the real V4 tokenizer
(generated once per machine by `flashseek gen-checkpoint`), and `flashseek serve` processes on loopback ports.

Every test here runs without a GPU against the CPU backend. Environment: FLASHSEEK_BIN (the built binary) and
FLASHSEEK_SOURCE_DIR (the source tree), both set by ctest.
"""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("FLASHSEEK_SOURCE_DIR", os.path.abspath(os.path.join(HERE, "..", "..")))
sys.path.insert(0, HERE)


def flashseek_bin():
    b = os.environ.get("FLASHSEEK_BIN")
    if b and os.path.exists(b):
        return b
    for d in ("build", "build-server", "build-cpu"):
        p = os.path.join(SOURCE_DIR, d, "tools", "flashseek", "flashseek")
        if os.path.exists(p):
            return p
    raise RuntimeError("flashseek binary not found: set FLASHSEEK_BIN")


def tiny_model_dir():
    """Generates (once) the tiny server test model: tests/server/tiny_server_config.json + the V4 tokenizer."""
    cfg = os.path.join(HERE, "tiny_server_config.json")
    tok_dir = os.path.join(SOURCE_DIR, "assets", "tokenizer", "deepseek-v4")
    digest = hashlib.sha256(open(cfg, "rb").read()).hexdigest()[:12]
    root = os.environ.get("FLASHSEEK_TEST_CACHE",
                          os.path.join(os.path.expanduser("~"), ".cache", "flashseek", "test-models"))
    out = os.path.join(root, f"tiny-server-{digest}")
    if os.path.exists(os.path.join(out, "ready")):
        return out
    tmp = out + f".tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    subprocess.run([flashseek_bin(), "gen-checkpoint", "--config", cfg, "--out", tmp, "--seed", "7"], check=True,
                   stdout=subprocess.DEVNULL)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, f), os.path.join(tmp, f))
    open(os.path.join(tmp, "ready"), "w").write("ok\n")
    try:
        os.rename(tmp, out)
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    return out


class Server:
    """One `flashseek serve` process on 127.0.0.1 with an OS-chosen port."""

    def __init__(self, *extra_args, model=None, env=None):
        self.model = model or tiny_model_dir()
        self.args = [flashseek_bin(), "serve", "--model", self.model, "--port", "0", "--threads", "1",
                     "--served-model-name", "tiny"] + list(extra_args)
        self.log_path = tempfile.mktemp(prefix="flashseek-serve-", suffix=".log")
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, **(env or {})))
        self.port = None
        deadline = time.time() + 180
        while time.time() < deadline:
            text = open(self.log_path).read()
            m = re.search(r"listening on http://([0-9.]+):(\d+)", text)
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.05)
        if self.port is None:
            self.stop()
            raise RuntimeError("serve did not start in time:\n" + open(self.log_path).read())
        self.base = f"http://127.0.0.1:{self.port}"

    def url(self, path):
        return self.base + path

    def logs(self):
        return open(self.log_path).read()

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def metrics(self):
        text = http_get(self.url("/metrics"))[1]
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
        return out

    def metric(self, name, **labels):
        m = self.metrics()
        for k, v in m.items():
            base = k.split("{", 1)[0]
            if base != name:
                continue
            if all(f'{lk}="{lv}"' in k for lk, lv in labels.items()):
                return v
        raise KeyError(name)

    def rss_kb(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def wait_idle_and_audit(self, timeout=10):
        """Exact state-memory audit: nothing running or waiting, no blocks or sequences held, accounting consistent."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            m = self.metrics()
            get = lambda n: next(v for k, v in m.items() if k.split("{", 1)[0] == n)
            last = {n: get("flashseek:" + n) for n in (
                "num_requests_running", "num_requests_waiting", "state_memory_used_blocks",
                "state_memory_live_sequences", "state_audit_ok", "requests_in_flight")}
            if (last["num_requests_running"] == 0 and last["num_requests_waiting"] == 0
                    and last["state_memory_used_blocks"] == 0 and last["state_memory_live_sequences"] == 0
                    and last["state_audit_ok"] == 1 and last["requests_in_flight"] == 0):
                return last
            time.sleep(0.05)
        raise AssertionError(f"state memory not back to empty after {timeout}s: {last}")


def http_request(method, url, body=None, headers=None, timeout=120):
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None and "Content-Type" not in (headers or {}):
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def http_get(url, headers=None):
    s, b, _ = http_request("GET", url, headers=headers)
    return s, b


def post_json(url, body, headers=None, timeout=120):
    s, b, h = http_request("POST", url, body, headers, timeout)
    try:
        j = json.loads(b)
    except ValueError:
        j = None
    return s, j, h


def sse_events(server, path, body, timeout=120):
    """Streams a request and returns the parsed `data:` payloads (the final "[DONE]" kept as a string)."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200, (r.status, r.read())
    raw = r.read()
    conn.close()
    raw.decode("utf-8")  # every byte of the stream must be valid UTF-8
    events = []
    for block in raw.split(b"\n\n"):
        if not block.strip():
            continue
        assert block.startswith(b"data: "), block
        payload = block[6:].decode()
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


@pytest.fixture(scope="session")
def model_dir():
    return tiny_model_dir()


@pytest.fixture(scope="module")
def server(model_dir):
    s = Server("--enable-debug-hooks", "--max-num-seqs", "16", model=model_dir)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def hf_tokenizer():
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(SOURCE_DIR, "assets", "tokenizer", "deepseek-v4", "tokenizer.json"))


EOS = 1  # the token id that ends a forced output


def forced(hf_tokenizer, text, eos=True):
    """The ids of text (no special tokens added), then EOS unless eos=False: a `debug_forced_tokens` list."""
    return hf_tokenizer.encode(text, add_special_tokens=False).ids + ([EOS] if eos else [])


@pytest.fixture(scope="module")
def client(server):
    """The official `openai` client against the module's server (imported here, so only the suites using it need it)."""
    import openai
    return openai.OpenAI(base_url=server.url("/v1"), api_key="unused", max_retries=0, timeout=120)
