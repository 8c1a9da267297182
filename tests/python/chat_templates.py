"""The chat templates that llama.cpp keeps of released models, for the template parity gate.

llama.cpp's ``models/templates/`` holds the ``chat_template`` of each model's
``tokenizer_config.json`` as published on its Hugging Face page (Llama 3.x, Qwen2.5 /
Qwen3 / Qwen3.5, gpt-oss, Phi-3.5, Mistral, Gemma, ...). They come from the pinned
llama-cpp-python sdist (``ggml_metal_source.sdist()``, fetched once into the cache) and
are copied flat into ``<cache>/llama-cpp-templates/<version>/``; nothing of them is
committed here.
"""
from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path

import cache_lock
import ggml_metal_source
from metalrt.default_model import cache_dir

_TEMPLATES = f"llama_cpp_python-{ggml_metal_source.VERSION}/vendor/llama.cpp/models/templates/"


def templates_dir() -> Path:
    """The directory of ``<model>.jinja`` files, extracted on first use."""
    target = cache_dir() / "llama-cpp-templates" / ggml_metal_source.VERSION
    with cache_lock.held(f"llama-cpp-templates/{ggml_metal_source.VERSION}"):
        if not target.exists():
            partial = target.with_name(f"{target.name}.{os.getpid()}.part")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            try:
                with tarfile.open(ggml_metal_source.sdist()) as tar:
                    for m in tar.getmembers():
                        name = m.name[len(_TEMPLATES):]
                        if m.isfile() and m.name.startswith(_TEMPLATES) and name.endswith(".jinja") \
                                and "/" not in name:
                            (partial / name).write_bytes(tar.extractfile(m).read())
                os.replace(partial, target)
            finally:
                shutil.rmtree(partial, ignore_errors=True)
    return target


def template(name: str) -> str:
    """The text of ``<name>.jinja``."""
    return (templates_dir() / f"{name}.jinja").read_text(encoding="utf-8")
