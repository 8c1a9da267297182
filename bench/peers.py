"""The peers metalrt is measured against, installed into a venv of their own
(``python -m bench --install-peers``) and run there in subprocesses.

Each peer is one pip install step. What a step did is kept in ``bench-peers.json``
inside the venv, so that a later benchmark run reports a peer that could not be
installed with pip's own reason (after the import error it meets now: the record may
be older than the venv) instead of dropping it. torch comes only as
``torch==2.13.0`` (the pin of metalrt's test extra; pip finds the CPU wheel the
machine provides) and a constraints file keeps any later step from pulling another
torch. llama-cpp-python has no wheel on PyPI for Linux: it builds llama.cpp from
source, at the lowest CPU priority (the machine may be shared) with a compile job per
CPU, and again whenever the build settings below change (a venv built with others is
reported as not installed until it is rebuilt).
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

TORCH_PIN = "torch==2.13.0"
STATUS_FILE = "bench-peers.json"


@dataclass(frozen=True)
class Peer:
    """One installable peer: its pip requirements and the module that proves it
    imports. ``variants`` are the configurations the generation table gets a row for."""

    name: str
    requirements: Sequence[str]
    modules: Sequence[str]   # all import in the venv: the peer is available
    variants: Sequence[str]
    loads_hf_export: bool = False   # runs on the Hugging Face export of the GGUF
    source_dist: Optional[str] = None   # the distribution pip builds from source
    build_env: Optional[Dict[str, str]] = None   # the environment of that build


def _llama_cpp_build_env() -> Dict[str, str]:
    """Without the multimodal library (LLAVA_BUILD: text generation does not load it,
    and it is a third of the build). On x86-64 also without ggml's AMX-INT8 matmul: on
    AMX hosts it segfaults on every prompt of more than one token (seen here on a
    Sapphire Rapids VM, at every n_ubatch; reported as
    https://github.com/ggml-org/llama.cpp/issues/20824). ggml compiles that path only
    where the compiler defines __AMX_INT8__, and an explicit -mno- flag holds against
    the -march=native ggml adds after it; the rest of the build stays native."""
    env = {"CMAKE_ARGS": "-DLLAVA_BUILD=OFF"}
    if platform.machine().lower() in ("x86_64", "amd64"):
        env["CFLAGS"] = env["CXXFLAGS"] = "-mno-amx-int8"
    return env


PEERS = (
    # torch, gguf and accelerate too: mlx-lm pulls in transformers without them, and
    # transformers needs all three to load a GGUF.
    Peer("transformers", (TORCH_PIN, "transformers", "accelerate", "gguf"),
         ("transformers", "torch", "gguf", "accelerate"), ("fp32", "bf16"), loads_hf_export=True),
    Peer("mlx", ("mlx[cpu]", "mlx-lm"), ("mlx_lm",), ("fp32",), loads_hf_export=True),
    # The server extra: bench/serving.py runs llama.cpp's OpenAI-compatible server.
    Peer("llama.cpp", ("llama-cpp-python[server]",), ("llama_cpp",), ("q4_1",),
         source_dist="llama-cpp-python", build_env=_llama_cpp_build_env()),
)


EXPORTER = "transformers"        # the peer whose venv writes the Hugging Face export
IMPORT_CHECK_SECONDS = 300       # importing torch on a loaded machine takes long


def default_venv() -> Path:
    """``$METALRT_BENCH_VENV``, else ``bench-peers`` in metalrt's cache directory
    (absolute: the workers run in another directory)."""
    env = os.environ.get("METALRT_BENCH_VENV")
    if env:
        return Path(env).expanduser().absolute()
    cache = os.environ.get("METALRT_CACHE_DIR") or Path.home() / ".cache" / "metalrt"
    return (Path(cache).expanduser() / "bench-peers").absolute()


def python_of(venv_dir: Path) -> Path:
    return venv_dir / "bin" / "python"


def install_hint(venv_dir: Path, names: Sequence[str] = ()) -> str:
    peers = f" --peers {','.join(names)}" if names else ""
    return f"python -m bench --install-peers{peers} --peers-venv {shlex.quote(str(venv_dir))}"


def read_status(venv_dir: Path) -> Dict[str, Dict]:
    """What ``install`` recorded per peer; {} when nothing readable was (a file
    that is not a JSON object of objects is ignored, not trusted)."""
    try:
        status = json.loads((venv_dir / STATUS_FILE).read_text())
    except (OSError, ValueError, RecursionError):   # RecursionError: absurdly nested JSON
        return {}
    if not isinstance(status, dict):
        return {}
    return {k: v for k, v in status.items() if isinstance(v, dict)}


def last_words(text: str, lines: int = 4) -> str:
    """The last non-empty lines of a process's output, on one line, each stripped
    of its surrounding and repeated blanks."""
    said = [" ".join(line.split()) for line in text.splitlines()
            if line.strip() and not line.startswith("WARNING: Location")]
    return " / ".join(said[-lines:])


def with_exporter(names: Sequence[str]) -> List[str]:
    """``names`` plus the exporter peer when a named peer runs on its export."""
    needs = any(p.loads_hf_export for p in PEERS if p.name in names)
    return list(names) + ([EXPORTER] if needs and EXPORTER not in names else [])


def install(venv_dir: Path, names: Sequence[str]) -> Dict[str, Dict]:
    """Creates the venv if needed and pip-installs each named peer (and the
    transformers peer when a named one runs on its Hugging Face export); returns (and
    saves) {peer: {"installed": bool, "reason": str}}. Never raises for a peer that
    fails: its reason is pip's last lines."""
    wanted = with_exporter(names)
    if wanted != list(names):
        print(f"bench: also installing {EXPORTER}: it writes the Hugging Face export of the "
              "GGUF that the mlx rows load", file=sys.stderr)
    names = wanted
    if not python_of(venv_dir).exists():
        venv.EnvBuilder(with_pip=True).create(venv_dir)
    constraints = venv_dir / "constraints.txt"
    constraints.write_text(TORCH_PIN + "\n")
    status = read_status(venv_dir)
    for peer in PEERS:
        if peer.name not in names:
            continue
        pip = [str(python_of(venv_dir)), "-m", "pip", "--disable-pip-version-check"]
        cmd = [*pip, "install", "-c", str(constraints), *peer.requirements]
        if peer.source_dist:
            # pip's wheel cache keys a source build by the sdist, not by the build's
            # environment: a cached wheel may have been built with other settings.
            cmd.insert(len(pip) + 1, "--no-cache-dir")
            # Not recorded as built with these settings (another build, a failed or
            # unrecorded one, an unreadable record): a copy already in the venv would be
            # kept by pip ("already satisfied") and then recorded as this build.
            if status.get(peer.name, {}).get("build_env") != peer.build_env:
                print(f"bench: (re)building {peer.source_dist}: no build with these settings "
                      "is recorded", file=sys.stderr)
                removed = subprocess.run([*pip, "uninstall", "-y", "-q", peer.source_dist],
                                         capture_output=True, text=True, errors="replace")
                if removed.returncode:
                    status[peer.name] = {"installed": False, "reason":
                                         f"pip uninstall of the old build failed (exit "
                                         f"{removed.returncode}): {last_words(removed.stderr)}"}
                    print(f"bench: {peer.name}: {status[peer.name]['reason']}", file=sys.stderr)
                    continue
        env = dict(os.environ, **(peer.build_env or {}))
        if peer.source_dist:
            env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(os.cpu_count() or 1)
        print(f"bench: installing {peer.name}: {' '.join(peer.requirements)}", file=sys.stderr)
        # nice 19: a source build must not slow down the other work on the machine.
        proc = subprocess.run(["nice", "-n", "19", *cmd], capture_output=True, text=True,
                              errors="replace", env=env)
        ok = proc.returncode == 0
        status[peer.name] = {"installed": ok, "reason": "" if ok else
                             f"pip install failed (exit {proc.returncode}): "
                             f"{last_words(proc.stderr or proc.stdout)}"}
        if ok and peer.build_env:
            status[peer.name]["build_env"] = peer.build_env
        print(f"bench: {peer.name}: {'installed' if ok else status[peer.name]['reason']}",
              file=sys.stderr)
    (venv_dir / STATUS_FILE).write_text(json.dumps(status, indent=1))
    return status


def availability(venv_dir: Path, names: Sequence[str], timeout: float = IMPORT_CHECK_SECONDS
                 ) -> Dict[str, Dict]:
    """{peer: {"available": bool, "reason": str}} for the peers in ``names``: a peer is
    available when its modules import (within ``timeout`` seconds) in the venv;
    otherwise the reason is the import's error (its last line) and how to install the
    peer, followed, as context only, by the install failure ``install`` recorded (a
    stale record must not hide what is wrong now)."""
    status = read_status(venv_dir)
    result = {}
    for peer in PEERS:
        if peer.name not in names:
            continue
        print(f"bench: does {peer.name} import in {venv_dir}?", file=sys.stderr)
        reason = ""
        if not python_of(venv_dir).exists():
            reason = f"not installed (no peers venv at {venv_dir}; run `{install_hint(venv_dir)}`)"
        elif _stale_build(status.get(peer.name, {}), peer):
            built = status[peer.name].get("build_env")
            reason = (f"not installed (built with {'unrecorded settings' if built is None else built}"
                      f", not {peer.build_env}; run `{install_hint(venv_dir, [peer.name])}` "
                      "to rebuild it)")
        else:
            error = _import_failure(venv_dir, peer, timeout)
            if error:
                reason = f"not installed ({error}; run `{install_hint(venv_dir, [peer.name])}`)"
                recorded = status.get(peer.name, {}).get("reason")
                if recorded and isinstance(recorded, str):
                    reason += f"; {STATUS_FILE} records an earlier install failure: {recorded}"
        result[peer.name] = {"available": not reason, "reason": reason}
    return result


def _stale_build(recorded: Dict, peer: Peer) -> bool:
    """Whether ``install`` recorded a working build of ``peer``'s source distribution
    made with another environment than the one it would build with now."""
    return bool(peer.source_dist and recorded.get("installed") is True
                and recorded.get("build_env") != peer.build_env)


def _import_failure(venv_dir: Path, peer: Peer, timeout: float) -> str:
    """"" when every module of ``peer`` imports in the venv, else why not."""
    code = "; ".join(f"import {m}" for m in peer.modules)
    try:
        proc = subprocess.run([str(python_of(venv_dir)), "-c", code], capture_output=True,
                              text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"importing {', '.join(peer.modules)} took over {timeout:g} s"
    except OSError as e:
        return f"the venv's python does not run: {e}"
    if proc.returncode == 0:
        return ""
    return last_words(proc.stderr, 1) or f"importing {', '.join(peer.modules)} exited {proc.returncode}"


def peer_names() -> List[str]:
    return [p.name for p in PEERS]
