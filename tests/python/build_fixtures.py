"""Builds the slow fixtures of the pytest gates into metalrt's cache, ahead of the tests:
the hybrid and MoE models, the released chat templates, the bench's peers venv
(llama-cpp-python is built from source there) and the quantized files made with it, and
ggml's kernel libraries
compiled for the simulated device (the MSL coverage corpus; the kernel cache keeps
them by source, so a later run compiles only what changed).

tests/run.sh starts it in the background at the lowest CPU priority once the wheel
is installed, so that it uses what the C++ gates and pytest leave of the CPU; a test
that needs a fixture still being made waits for it (cache_lock), and pytest runs the
tests that use these fixtures last (conftest.py). Every fixture is built even when
one fails; the exit status is 1 if any did, and tests/run.sh fails the run then. A new
fixture that takes more than seconds to make belongs here too (in MODULES and steps()),
behind a cache_lock like the others.

    python tests/python/build_fixtures.py
"""
from __future__ import annotations

import os
import sys
import time
import traceback

import chat_templates
import family_gguf_fixtures
import ggml_metal_source
import gpt_oss_gguf_fixtures
import moe_gguf_fixtures
import quant_fixtures
import real_geometry
import tiny_hybrid

# The modules whose fixtures are built here, in the order pytest reaches them.
MODULES = (tiny_hybrid, moe_gguf_fixtures, chat_templates, family_gguf_fixtures,
           gpt_oss_gguf_fixtures, ggml_metal_source, quant_fixtures, real_geometry)


def _ggml_corpus() -> None:
    os.environ["CXX"] = ggml_metal_source.CXX
    source = ggml_metal_source.source_dir()
    for library in ggml_metal_source.kernel_files(source):
        ggml_metal_source.compile_library(source, library.stem)


def steps():
    """(label, build) of every fixture, in MODULES' order."""
    yield from ((f"hybrid {n}", lambda n=n: tiny_hybrid.path(n)) for n in tiny_hybrid.CONFIGS)
    yield from ((f"moe gguf {n}", lambda n=n: moe_gguf_fixtures.fixture(n))
                for n in moe_gguf_fixtures.CONFIGS)
    yield "chat templates", chat_templates.templates_dir
    yield from ((f"family gguf {n}", lambda n=n: family_gguf_fixtures.fixture(n))
                for n in family_gguf_fixtures.CONFIGS)
    yield "gpt-oss gguf", gpt_oss_gguf_fixtures.fixture
    yield "ggml kernel libraries", _ggml_corpus
    quantized = dict.fromkeys((*quant_fixtures.FIXTURES, *quant_fixtures.REAL_FILE_GGUFS))
    yield from ((f"quantized {n}", lambda n=n: quant_fixtures.fixture(n)) for n in quantized)
    yield from ((f"real geometry {n} {part}", lambda n=n, part=part: real_geometry.fixture(n, part))
                for n in real_geometry.CONFIGS for part in real_geometry.REFERENCE)


def main() -> int:
    start, failed = time.monotonic(), []
    for label, build in steps():
        began = time.monotonic()
        try:
            build()
        except Exception:   # noqa: BLE001 - reported, and the exit status says it
            failed.append(label)
            traceback.print_exc()
        print(f"build_fixtures: {label}: {'FAILED' if label in failed else 'ready'} "
              f"({time.monotonic() - began:.0f} s)", flush=True)
    print(f"build_fixtures: {time.monotonic() - start:.0f} s in all"
          + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
