"""``python -m metalrt.server`` on a free loopback port for the server gates, talked to
with the official ``openai`` client (every byte goes to 127.0.0.1)."""
import json
import time
import urllib.error
import urllib.request

import openai

from metalrt.server.launch import ServerProcess as _Launched
from metalrt.server.launch import free_port, metalrt_command

STARTUP_SECONDS = 180     # loading the model on a shared, loaded machine
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"


class ServerProcess(_Launched):
    """The server with the default model on the CPU and ``settings`` (extra flags)."""

    def __init__(self, *settings: str, api_key: str = None):
        port = free_port()
        super().__init__(metalrt_command(port, "--device", "cpu", "--log-level", "warning",
                                         *settings, *(("--api-key", api_key) if api_key else ())),
                         port, STARTUP_SECONDS, api_key=api_key)
        self.api_key = api_key
        assert self.model == MODEL_ID

    def client(self, timeout: float = 60) -> openai.OpenAI:
        http = openai.DefaultHttpxClient(trust_env=False, timeout=timeout)
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.api_key or "unused",
                             max_retries=0,
                             http_client=http)

    def request(self, method: str, path: str, body: bytes = None, content_type="application/json"):
        """(status, decoded JSON body) of one plain HTTP request."""
        req = urllib.request.Request(self.url + path, data=body, method=method,
                                     headers={"content-type": content_type})
        try:
            with self.opener.open(req, timeout=60) as response:
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
