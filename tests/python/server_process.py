"""Starts ``python -m metalrt.server`` on a free loopback port for the server gates and
talks to it with the official ``openai`` client (every byte goes to 127.0.0.1)."""
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import openai

STARTUP_SECONDS = 180     # loading the model on a shared, loaded machine
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """The server with the default model on the CPU and ``args`` (extra settings)."""

    def __init__(self, *args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "metalrt.server", "--device", "cpu", "--host", "127.0.0.1",
             "--port", str(self.port), "--log-level", "warning", *args],
            stdout=self.log, stderr=subprocess.STDOUT)
        # No proxy from the environment sits between the gates and loopback.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}: {self.output()}")
            try:
                if self.request("GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the server did not start in {STARTUP_SECONDS} s: {self.output()}")
            time.sleep(0.5)

    def client(self, timeout: float = 60) -> openai.OpenAI:
        http = openai.DefaultHttpxClient(trust_env=False, timeout=timeout)
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0,
                             http_client=http)

    def request(self, method: str, path: str, body: bytes = None, content_type="application/json"):
        """(status, decoded JSON body) of one plain HTTP request."""
        req = urllib.request.Request(self.url + path, data=body, method=method,
                                     headers={"content-type": content_type})
        try:
            with self._opener.open(req, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def stats(self) -> dict:
        status, body = self.request("GET", "/health")
        assert status == 200 and body["status"] == "ok"
        return body["engine"]

    def wait_for(self, condition, seconds: float = 30) -> dict:
        """Polls /health until ``condition(stats)``; returns the stats (fails on timeout)."""
        deadline = time.monotonic() + seconds
        while True:
            stats = self.stats()
            if condition(stats):
                return stats
            assert time.monotonic() < deadline, f"condition not met in {seconds} s: {stats}"
            time.sleep(0.05)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()[-3000:]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
