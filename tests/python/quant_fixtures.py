"""Quantized variants of the default model and their reference outputs, made once per
machine in ``<metalrt cache>/quant-fixtures`` (never committed):

* ``q8_0``, ``q4_k_m``, ``q4_0``, ``q5_1``, ``q5_k_m`` and ``q2_k``: GGUFs requantized from the default Q4_1 file by llama.cpp's
  quantizer (``llama_model_quantize`` of ``llama-cpp-python``, ``allow_requantize``:
  it dequantizes to float32 first). With K = 576 the Q4_K_M recipe falls back to
  Q5_0 / Q8_0 for most tensors; ffn_down (K = 1536) gets Q4_K / Q6_K. The Q2_K recipe
  falls back to Q4_0 at K = 576 and gives ffn_down Q3_K (the real Q3_K blocks).
* ``mlx_4bit_g64`` and ``mlx_8bit_g64``: MLX directories converted by ``mlx_lm.convert``
  from the float Hugging Face export of the default model (``bench/export_hf.py``).

Each fixture's reference is its own implementation's greedy continuation of PROMPT
(llama.cpp for the GGUFs, mlx-lm for the MLX directories) with the top-2 logit margin
of every step, stored as ``reference.json`` next to it. All of it runs in the bench's
peers venv, installed by its installer (``bench/peers.py``) on first use when a tool
is missing; a fixture whose tool cannot be installed raises FixtureUnavailable with
the reason.

    python tests/python/quant_fixtures.py [NAME ...]   # build ahead of the tests
"""
from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import cache_lock  # noqa: E402
from bench import peers  # noqa: E402
from metalrt.default_model import cache_dir, default_model_path  # noqa: E402

PROMPT = [6403, 1980, 253, 655]     # "Once upon a time"
STEPS = 16
REFERENCE = "reference.json"
# llama.cpp's llama_ftype values (include/llama.h).
GGUF_FTYPES = {"q8_0": 7, "q4_k_m": 15, "q4_0": 2, "q5_1": 9, "q5_k_m": 17, "q2_k": 10}
MLX_BITS = {"mlx_4bit_g64": (4, 64), "mlx_8bit_g64": (8, 64)}
# Continued against their reference by test_quantized_models; with the default Q4_1
# file, the other GGUFs complete the real-file dequantize gate's set of block types.
FIXTURES = ("q8_0", "q4_k_m", "q2_k", *MLX_BITS)
REAL_FILE_GGUFS = ("q8_0", "q4_k_m", "q4_0", "q5_1", "q5_k_m", "q2_k")


class FixtureUnavailable(RuntimeError):
    """The peers venv lacks the tool that makes a fixture."""


_QUANTIZE = """
import ctypes, sys, llama_cpp
params = llama_cpp.llama_model_quantize_default_params()
params.ftype, params.allow_requantize, params.nthread = int(sys.argv[3]), True, 2
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(),
                                        ctypes.byref(params)))
"""

# Both references: ``step(previous token or None for the prompt)`` returns the logits
# after it; the loop records the greedy ids and the top-2 margin of every step.
_REFERENCE_LOOP = """
import numpy as np
ids, margins, token = [], [], None
for _ in range(STEPS):
    logits = np.asarray(step(token), dtype=np.float64)
    top2 = np.sort(logits)[-2:]
    token = int(np.argmax(logits))
    ids.append(token)
    margins.append(float(top2[1] - top2[0]))
json.dump({"prompt": PROMPT, "ids": ids, "margins": margins}, open(sys.argv[2], "w"))
"""

_LLAMA_CPP_REFERENCE = """
import json, sys, llama_cpp
PROMPT, STEPS = json.loads(sys.argv[3]), int(sys.argv[4])
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_threads=2, logits_all=True,
                      verbose=False)
def step(token):
    llm.eval(PROMPT if token is None else [token])
    return llm.scores[llm.n_tokens - 1]
""" + _REFERENCE_LOOP

_MLX_REFERENCE = """
import json, sys
import mlx.core as mx
from mlx_lm import load
from mlx_lm.models.cache import make_prompt_cache
PROMPT, STEPS = json.loads(sys.argv[3]), int(sys.argv[4])
model, _ = load(sys.argv[1])
cache = make_prompt_cache(model)
def step(token):
    x = mx.array([PROMPT if token is None else [token]])
    return model(x, cache=cache)[0, -1].astype(mx.float32).tolist()
""" + _REFERENCE_LOOP

_MLX_CONVERT = """
import sys
from mlx_lm import convert
convert(sys.argv[1], mlx_path=sys.argv[2], quantize=True, q_bits=int(sys.argv[3]),
        q_group_size=int(sys.argv[4]))
"""


def fixture_dir() -> Path:
    return cache_dir() / "quant-fixtures"


@functools.lru_cache(maxsize=None)
def _peer_python(peer: str) -> str:
    """The peers venv's python once ``peer`` imports there, installed by the bench's
    installer when it does not (once per machine; llama-cpp-python builds llama.cpp).
    Checked once per process, under the venv's lock: one pip at a time writes there."""
    venv = peers.default_venv()
    with cache_lock.held(venv.name):
        if not peers.availability(venv, [peer])[peer]["available"]:
            peers.install(venv, [peer])
            status = peers.availability(venv, [peer])[peer]
            if not status["available"]:
                raise FixtureUnavailable(f"[quant_fixtures] {peer} is needed: {status['reason']}")
    return str(peers.python_of(venv))


def peer_python(peer: str) -> str:
    """The peers venv's python with ``peer`` importable (installed on first use); raises
    FixtureUnavailable when it cannot be."""
    return _peer_python(peer)


def _run(python: str, code_or_module, *args, cwd=None) -> None:
    cmd = [python, "-m", code_or_module[1:]] if code_or_module.startswith(":") else \
        [python, "-c", code_or_module]
    proc = subprocess.run(["nice", "-n", "10", *cmd, *map(str, args)], capture_output=True,
                          text=True, errors="replace", cwd=cwd)
    if proc.returncode:
        raise RuntimeError(f"[quant_fixtures] {' '.join(cmd[:3])} exited {proc.returncode}: "
                           f"{peers.last_words(proc.stderr or proc.stdout, 8)}")


@functools.lru_cache(maxsize=None)
def hf_export() -> Path:
    """The default model as a float Hugging Face directory (``bench.export_hf``, kept
    while it matches its stamp; checked once per process)."""
    python = _peer_python(peers.EXPORTER)
    with cache_lock.held("quant-fixtures/hf-export"):
        hf = cache_dir() / "quant-fixtures" / "hf-export"
        _run(python, ":bench.export_hf", default_model_path(), hf, cwd=ROOT)
    return hf


def quantize_gguf(source: Path, target: Path, ftype: int) -> None:
    """``source`` requantized to llama.cpp's ``ftype`` by its own quantizer."""
    _run(_peer_python("llama.cpp"), _QUANTIZE, source, target, ftype)


def _make(name: str, out: Path) -> Path:
    """Writes fixture ``name`` into the empty directory ``out``; returns its model path."""
    source = default_model_path()
    if name in GGUF_FTYPES:
        model = out / f"{name}.gguf"
        quantize_gguf(source, model, GGUF_FTYPES[name])
        _run(_peer_python("llama.cpp"), _LLAMA_CPP_REFERENCE, model, out / REFERENCE, json.dumps(PROMPT), STEPS)
        return model
    python = _peer_python("mlx")
    hf = hf_export()
    model = out / "model"
    bits, group = MLX_BITS[name]
    _run(python, _MLX_CONVERT, hf, model, bits, group)
    _run(python, _MLX_REFERENCE, model, out / REFERENCE, json.dumps(PROMPT), STEPS)
    return model


def fixture(name: str) -> tuple[Path, dict]:
    """(model path, reference) of fixture ``name``, made on first use (into a temporary
    directory renamed into place when complete, so a killed run leaves nothing
    half-made). Raises FixtureUnavailable when the peers venv lacks its tool."""
    final = fixture_dir() / name
    with cache_lock.held(f"{final.parent.name}/{name}"):
        if not (final / REFERENCE).exists():
            final.parent.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=name + ".partial-", dir=final.parent))
            try:
                _make(name, partial)
                if final.exists():
                    shutil.rmtree(final)
                partial.rename(final)
            finally:
                shutil.rmtree(partial, ignore_errors=True)
    model = final / (f"{name}.gguf" if name in GGUF_FTYPES else "model")
    return model, json.loads((final / REFERENCE).read_text())


if __name__ == "__main__":
    for fixture_name in sys.argv[1:] or (*FIXTURES, *REAL_FILE_GGUFS[2:]):
        path, ref = fixture(fixture_name)
        print(fixture_name, path, ref["ids"], [round(m, 2) for m in ref["margins"]])
