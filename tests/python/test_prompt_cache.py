"""Prompt caches on disk (issue #36): ``save_prompt_cache`` / ``load_prompt_cache``
round trips into a fresh model object that prefills only the prompt's tail with the same
greedy output (default model; the tiny Qwen3-Next hybrid with its state checkpoint);
truncated, foreign and tampered files refused with ValueError naming the file; and
``metalrt serve --prompt-cache-dir`` serving a 4k-token prefix after a restart from the
file it wrote, skipping corrupt and foreign files with a warning; the engine thread
only copies a finished prefix's KV rows, a writer thread writes the file."""
import json
import os
import struct
import threading
import time

import pytest

import metalrt
import tiny_hybrid
from metalrt.cache import BLOCK_SIZE
from metalrt.cache import prompt_file
from metalrt.runner import Engine, SamplingParams
from metalrt.server import prompt_cache_dir
from server_process import MODEL_ID, ServerProcess

WORDS = "The river town traded salt, wool and timber with its neighbours across the hills. "


@pytest.fixture(scope="module", autouse=True)
def f32_prefill():
    """The tail after a cached prefix is prefilled alone (the f32 GEMV path for up to 16
    tokens) where the first run prefilled the whole prompt: on the f32 GEMM both paths'
    logits are within greedy margins (test_server.py says why)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("METALRT_CPU_GEMM", "f32")
        yield


@pytest.fixture(scope="module")
def smollm2(f32_prefill):
    return metalrt.load(device="cpu")


def run(model, tokenizer, ids, cache=None, max_tokens=6):
    """(generated ids, prompt tokens taken from ``cache``)."""
    out = list(metalrt.stream_generate(model, tokenizer, ids, max_tokens, prompt_cache=cache))
    return [r.token for r in out], out[-1].prompt_cached_tokens


@pytest.fixture(scope="module")
def saved(smollm2, tmp_path_factory):
    """A file of the default model's prompt cache after a 300-token prompt, the prompt,
    and its greedy output without any cache."""
    model, tokenizer = smollm2
    ids = tokenizer.encode(WORDS * 30)[:300] + tokenizer.encode(" Who bought the salt?")
    reference, _ = run(model, tokenizer, ids)
    cache = metalrt.make_prompt_cache(model)
    output, cached = run(model, tokenizer, ids, cache)
    assert cached == 0 and output == reference
    assert cache.tokens == ids[:len(ids) // BLOCK_SIZE * BLOCK_SIZE]
    path = str(tmp_path_factory.mktemp("prompt-cache") / "smollm2.safetensors")
    metalrt.save_prompt_cache(path, cache, {"conversation": "salt"})
    return path, ids, reference


def test_round_trip_prefills_only_the_tail_in_a_fresh_model(saved):
    path, ids, reference = saved
    model, tokenizer = metalrt.load(device="cpu")   # another model object, as after a restart
    cache, metadata = metalrt.load_prompt_cache(path, return_metadata=True, model=model)
    assert metadata == {"conversation": "salt"} and cache.source == path
    output, cached = run(model, tokenizer, ids, cache)
    assert cached == (len(ids) - 1) // BLOCK_SIZE * BLOCK_SIZE >= 288
    assert output == reference and len(set(output)) > 1
    # Another tail after the same prefix reuses the cache as far as they agree.
    other = ids[:300] + tokenizer.encode(" And the wool?")
    assert run(model, tokenizer, other, metalrt.load_prompt_cache(path))[1] == 288


def test_save_from_copies_on_the_engine_thread_and_writes_on_another(smollm2, saved,
                                                                    tmp_path, monkeypatch):
    model, tokenizer = smollm2
    ids = saved[1]
    engine = Engine(model, model.kv_cache(64), 512, True)
    request = engine.add_request(ids, SamplingParams(), 2)
    while engine.has_work:
        engine.step()
    release, writers = threading.Event(), []

    def slow_write(path, prefix):   # a disk that takes its time
        writers.append(threading.current_thread())
        release.wait(5)
        prompt_file.write(path, prefix)

    monkeypatch.setattr(prompt_cache_dir, "write", slow_write)
    disk = prompt_cache_dir.PromptCacheDir(str(tmp_path), min_tokens=16)
    started = time.monotonic()
    path = disk.save_from(engine, request.prompt)
    assert time.monotonic() - started < 2.5    # did not wait for the write
    assert path and not os.path.exists(path) and disk.written == 0
    assert disk.save_from(engine, request.prompt) == path    # queued once
    release.set()
    disk.close()                                # flushes what is pending
    assert os.path.exists(path) and disk.written == 1
    assert len(writers) == 1 and writers[0] is not threading.current_thread()
    restored = prompt_file.read(path, prompt_file.identity(model, engine.cache))
    assert restored.tokens == ids[:len(ids) // BLOCK_SIZE * BLOCK_SIZE]
    engine.close()
    empty = Engine(model, model.kv_cache(64), 512, True)
    assert disk.save_from(empty, ids) is None      # nothing of it cached
    empty.close()


def rewrite_header(path, change):
    """Rewrites a safetensors file's JSON header through ``change(header)``."""
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    change(header)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data[8 + size:])


def test_truncated_tampered_and_foreign_files_are_refused(saved, smollm2, tmp_path):
    path, ids, reference = saved
    model, tokenizer = smollm2
    with open(path, "rb") as f:
        data = f.read()
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match=rf"^\[prompt_cache\] {truncated} is truncated or not a safetensors file"):
        metalrt.load_prompt_cache(str(truncated), model=model)
    kv_type = tmp_path / "kv.safetensors"
    kv_type.write_bytes(data)
    rewrite_header(kv_type, lambda h: h["__metadata__"].update({"metalrt.kv_dtype": "float16"}))
    with pytest.raises(ValueError, match=rf"{kv_type} is refused: its KV type is 'float16', "
                                         r"this model's cache has 'float32'"):
        metalrt.load_prompt_cache(str(kv_type), model=model)
    edited = tmp_path / "edited.safetensors"
    edited.write_bytes(data)
    rewrite_header(edited, lambda h: h["__metadata__"].update({"conversation": "wool"}))
    with pytest.raises(ValueError, match=rf"{edited} is refused: its digest does not match"):
        metalrt.load_prompt_cache(str(edited))
    hybrid, words = metalrt.load(str(tiny_hybrid.path("qwen3_next")), device="cpu")
    with pytest.raises(ValueError, match=rf"{path} is refused: it was made by another model "
                                         r"\(SmolLM2-135M-Instruct.Q4_1.gguf"):
        metalrt.load_prompt_cache(path, model=hybrid)
    # Loaded without a model, it is refused at the first generation of another model.
    with pytest.raises(ValueError, match=rf"{path} is refused: it was made by another model"):
        run(hybrid, words, tiny_hybrid.prompt(40, 1), metalrt.load_prompt_cache(path))
    with pytest.raises(FileNotFoundError):
        metalrt.load_prompt_cache(str(tmp_path / "missing.safetensors"))
    assert run(model, tokenizer, ids) == (reference, 0)     # and generation goes on


def test_hybrid_round_trip_restores_the_state_checkpoint(tmp_path):
    source = str(tiny_hybrid.path("qwen3_next"))
    model, tokenizer = metalrt.load(source, device="cpu")
    ids = tiny_hybrid.prompt(200, 3) + tiny_hybrid.prompt(9, 5)
    reference, _ = run(model, tokenizer, ids)
    cache = metalrt.make_prompt_cache(model)
    run(model, tokenizer, ids, cache)
    # The cache ends where a prompt chunk ended and the state was checkpointed: the
    # last block boundary before the last token.
    assert len(cache.tokens) == 208 and cache.prefix.state is not None
    path = str(tmp_path / "hybrid.safetensors")
    metalrt.save_prompt_cache(path, cache)
    fresh, tokenizer = metalrt.load(source, device="cpu")
    output, cached = run(fresh, tokenizer, ids, metalrt.load_prompt_cache(path, model=fresh))
    assert cached == 208 and output == reference


def wait_for_file(directory, seconds=60):
    deadline = time.monotonic() + seconds
    while not [n for n in os.listdir(directory) if n.endswith(".safetensors")]:
        assert time.monotonic() < deadline, "no prompt-cache file was written"
        time.sleep(0.1)
    return sorted(n for n in os.listdir(directory) if n.endswith(".safetensors"))


def test_server_restart_serves_a_4k_prefix_from_disk(smollm2, saved, tmp_path):
    model, tokenizer = smollm2
    directory = tmp_path / "cache" / MODEL_ID       # each served model's own subdirectory
    ids = (tokenizer.encode(WORDS * 300))[:4096] + tokenizer.encode(" Who bought the salt?")
    settings = ("--prompt-cache-dir", str(tmp_path / "cache"), "--prompt-cache-min-tokens", "1024")
    server = ServerProcess(*settings)
    try:
        first = server.client(timeout=300).completions.create(
            model=MODEL_ID, prompt=ids, max_tokens=6, temperature=0)
        assert first.usage.prompt_tokens_details.cached_tokens == 0
        (name,) = wait_for_file(directory)
        assert server.stats()["prompt_cache_files_written"] == 1
    finally:
        server.close()
    data = (directory / name).read_bytes()
    (directory / "truncated.safetensors").write_bytes(data[:len(data) // 3])
    (directory / "garbage.safetensors").write_bytes(b"not a safetensors file")
    os.link(saved[0], directory / "other.safetensors")    # a 300-token prefix: loaded too
    hybrid, words = metalrt.load(str(tiny_hybrid.path("qwen3_next")), device="cpu")
    foreign = metalrt.make_prompt_cache(hybrid)
    run(hybrid, words, tiny_hybrid.prompt(40, 1), foreign)
    metalrt.save_prompt_cache(str(directory / "foreign.safetensors"), foreign)
    server = ServerProcess(*settings)
    try:
        stats = server.stats()
        assert (stats["prompt_cache_files_loaded"], stats["prompt_cache_files_refused"]) == (2, 3)
        before = stats["prompt_tokens_computed"]
        second = server.client(timeout=300).completions.create(
            model=MODEL_ID, prompt=ids, max_tokens=6, temperature=0)
        cached = second.usage.prompt_tokens_details.cached_tokens
        assert cached == (len(ids) - 1) // BLOCK_SIZE * BLOCK_SIZE >= 4096
        assert server.stats()["prompt_tokens_computed"] - before == len(ids) - cached
        assert second.choices[0].text == first.choices[0].text
        log = server.output()
    finally:
        server.close()
    for bad, why in (("truncated", "is truncated or not a safetensors file"),
                     ("garbage", "is truncated or not a safetensors file"),
                     ("foreign", "is refused: it was made by another model")):
        assert f"metalrt: warning: prompt cache file skipped: [prompt_cache] " \
               f"{directory / bad}.safetensors {why}" in log
