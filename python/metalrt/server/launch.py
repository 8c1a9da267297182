"""Runs an OpenAI-compatible server (``metalrt serve``, or a peer's) as a subprocess on
127.0.0.1 and waits until it answers: what replicas on one host, the bench and the
gates start servers with."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Optional, Sequence


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metalrt_command(port: int, *settings: str) -> list:
    """``python -m metalrt.server`` on 127.0.0.1:``port`` with ``settings`` (flags of
    ``metalrt serve``)."""
    return [sys.executable, "-m", "metalrt.server", "--host", "127.0.0.1", "--port", str(port),
            *settings]


class ServerProcess:
    """Starts ``command`` (a server listening on 127.0.0.1:``port``; its output goes to
    a temporary file) and waits up to ``timeout`` seconds for ``GET /v1/models``;
    ``model`` is the first model id it lists. Raises RuntimeError, with the server's
    last output, when it exits or does not answer in time. ``api_key``: sent as a Bearer
    token; ``popen``: extra ``subprocess.Popen`` arguments (env, cwd...)."""

    def __init__(self, command: Sequence[str], port: int, timeout: float = 300,
                 api_key: Optional[str] = None, **popen):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(list(command), stdout=self.log, stderr=subprocess.STDOUT,
                                     **popen)
        # No proxy from the environment sits between us and loopback.
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        if api_key:
            self.opener.addheaders.append(("Authorization", f"Bearer {api_key}"))
        self.model: Optional[str] = None
        deadline = time.monotonic() + timeout
        while self.model is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}: "
                                   f"{self.output()[-2000:]}")
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the server did not answer within {timeout:g} s: "
                                   f"{self.output()[-2000:]}")
            try:
                with self.opener.open(f"{self.url}/v1/models", timeout=10) as response:
                    self.model = json.loads(response.read())["data"][0]["id"]
            except OSError:
                time.sleep(0.5)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def close(self) -> None:
        """Stops the server (SIGTERM, then SIGKILL after 20 s)."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
