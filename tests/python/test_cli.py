"""CLI gates: the help texts of the installed ``metalrt`` script; ``generate``'s settings,
chat wrapping and error exit through a recording stand-in for ``metalrt.load`` /
``metalrt.generate``; and the real thing: the default model's reference continuation
and the statistics lines."""
import importlib.metadata
import re
import shutil
import os
import subprocess

import pytest

import metalrt
from metalrt.cli import main
from metalrt.default_model import default_model_path
from metalrt.loaders import load_model_files
from metalrt.loaders.gguf_file import GGUFFile
from metalrt.tokenizer import Tokenizer
import tiny_hf
from tiny_models import tokenizer_metadata

GENERATE_OPTIONS = ["--model", "--prompt", "--max-tokens", "--temp", "--top-p", "--top-k",
                    "--min-p", "--repetition-penalty", "--repetition-context-size", "--seed",
                    "--device", "--chat", "--kv-type"]


def run_script(*args):
    script = shutil.which("metalrt")
    assert script, "the metalrt console script is not installed"
    return subprocess.run([script, *args], capture_output=True, text=True, timeout=120)


def test_help_documents_every_option():
    top = run_script("--help")
    assert top.returncode == 0 and "generate" in top.stdout and "METALRT_CACHE_DIR" in top.stdout
    gen = run_script("generate", "--help")
    assert gen.returncode == 0
    for option in GENERATE_OPTIONS:
        assert option in gen.stdout, option
    assert "auto,cpu,metal" in gen.stdout and "tokens-per-sec" in gen.stdout


def test_version_prints_the_installed_version():
    result = run_script("--version")
    assert result.returncode == 0
    assert result.stdout == f"metalrt {importlib.metadata.version('metalrt')}\n"


def test_missing_prompt_is_a_usage_error():
    result = run_script("generate")
    assert result.returncode == 2 and "--prompt" in result.stderr


class FakeRuntime:
    """Records what the CLI asks ``metalrt.load`` and ``metalrt.generate`` for."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.calls = {}

    def load(self, path, device="auto", kv_type=None):
        self.calls["load"] = (path, device) if kv_type is None else (path, device, kv_type)
        return "model", self.tokenizer

    def generate(self, model, tokenizer, prompt, **kwargs):
        self.calls["generate"] = (prompt, kwargs)
        return ""


@pytest.fixture
def fake(monkeypatch):
    runtime = FakeRuntime(Tokenizer.from_gguf_metadata(tokenizer_metadata()))
    monkeypatch.setattr(metalrt, "load", runtime.load, raising=False)
    monkeypatch.setattr(metalrt, "generate", runtime.generate, raising=False)
    return runtime


def test_generate_passes_every_setting(fake):
    assert main(["generate", "--prompt", "Once", "--max-tokens", "5", "--temp", "0.7",
                 "--top-p", "0.9", "--top-k", "40", "--min-p", "0.05", "--seed", "3",
                 "--repetition-penalty", "1.3", "--repetition-context-size", "64",
                 "--device", "cpu", "--model", "m.gguf"]) == 0
    assert fake.calls["load"] == ("m.gguf", "cpu")
    assert fake.calls["generate"] == ("Once", dict(max_tokens=5, verbose=True, temp=0.7,
                                                   top_p=0.9, top_k=40, min_p=0.05,
                                                   repetition_penalty=1.3,
                                                   repetition_context_size=64, seed=3,
                                                   spec_type=None, draft_model=None,
                                                   num_draft_tokens=4))


def test_generate_kv_type(fake):
    """--kv-type TYPE or KEY,VALUE reaches metalrt.load(kv_type=)."""
    assert main(["generate", "--prompt", "Once", "--kv-type", "q8_0"]) == 0
    assert fake.calls["load"] == (None, "auto", "q8_0")
    assert main(["generate", "--prompt", "Once", "--kv-type", "q4_0,f16"]) == 0
    assert fake.calls["load"] == (None, "auto", ("q4_0", "f16"))


def test_generate_chat_sends_template_token_ids(fake):
    assert main(["generate", "--chat", "--prompt", "hi"]) == 0
    prompt, kwargs = fake.calls["generate"]
    expected = fake.tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
                                     add_special_tokens=False)
    assert prompt == expected and kwargs["temp"] == 0.0 and kwargs["seed"] is None
    assert kwargs["repetition_penalty"] == 1.0 and kwargs["repetition_context_size"] == 20
    assert fake.calls["load"] == (None, "auto")


def test_generate_reports_unloadable_model(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(metalrt, "load", lambda path, device, kv_type: load_model_files(path), raising=False)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"nope")
    assert main(["generate", "--model", str(bad), "--prompt", "x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("metalrt: error: [gguf] ") and "not a GGUF file" in err


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    tiny_hf.build("llama", directory)
    return str(directory)


@pytest.mark.parametrize("args, message", [
    (["--temp", "-1"], "[sampling] temp must be >= 0"),
    (["--top-p", "0"], "[sampling] top_p must be in (0, 1]"),
    (["--repetition-penalty", "0"], "[sampling] repetition_penalty must be > 0 and finite"),
    (["--repetition-penalty", "inf"], "[sampling] repetition_penalty must be > 0 and finite"),
    (["--seed", "-1"], "[sampling] seed must be >= 0"),
    (["--repetition-context-size", "-1"], "[sampling] repetition_context_size must be >= 0"),
    (["--max-tokens", "0"], "[generate] max_tokens must be >= 1, got 0"),
    (["--kv-type", "q5_0"], "[kv_type] unknown KV cache type 'q5_0'; expected one of float32, float16, bfloat16, "
                            "q8_0, q4_0 (or f32, f16, bf16)"),
])
def test_bad_settings_print_one_error_line_and_nothing_else(monkeypatch, capsys, tiny_model_dir,
                                                          args, message):
    load = metalrt.load
    monkeypatch.setattr(metalrt, "load", lambda path, device, kv_type: load(tiny_model_dir, device="cpu",
                                                                       kv_type=kv_type))
    assert main(["generate", "--prompt", "t1 t2", *args]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == f"metalrt: error: {message}\n"


@pytest.mark.parametrize("variable, value, message", [
    ("METALRT_CPU_THREADS", "0", "METALRT_CPU_THREADS must be an integer in [1, 1024], got '0'"),
    ("METALRT_CPU_ISA", "fastest",
     "METALRT_CPU_ISA must be one of portable, avx2, avx512_vnni, neon, got 'fastest'"),
])
def test_bad_cpu_settings_print_one_error_line_and_nothing_else(tiny_model_dir, variable, value,
                                                                message):
    # They were met at the first forward step, after the '==========' header (and the
    # float model's GEMMs never read METALRT_CPU_ISA: it generated with it).
    script = shutil.which("metalrt")
    assert script, "the metalrt console script is not installed"
    result = subprocess.run([script, "generate", "--model", tiny_model_dir, "--prompt", "t1 t2",
                             "--max-tokens", "2", "--device", "cpu"], capture_output=True,
                            text=True, timeout=120, env={**os.environ, variable: value})
    assert (result.returncode, result.stdout, result.stderr) == (1, "", f"metalrt: error: {message}\n")


def test_a_closed_pipe_ends_generation_quietly(tiny_model_dir):
    """`metalrt generate ... | head -c 1`: the reader goes away, the CLI exits with
    128 + SIGPIPE and writes nothing to standard error."""
    script = shutil.which("metalrt")
    assert script, "the metalrt console script is not installed"
    proc = subprocess.Popen([script, "generate", "--model", tiny_model_dir, "--prompt", "t1 t2",
                             "--max-tokens", "100000", "--temp", "1", "--seed", "0", "--device", "cpu"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(1)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""


def test_bad_model_paths_print_one_error_line(tmp_path):
    missing = tmp_path / "missing.gguf"
    for path, message in [(missing, rf"\[load_model_files\] {missing}: no such file or directory"),
                          (tmp_path, r"\[load_model_files\] .*: expected a Hugging Face model directory")]:
        result = run_script("generate", "--model", str(path), "--prompt", "x", "--device", "cpu")
        assert result.returncode == 1 and result.stdout == ""
        assert re.fullmatch(rf"metalrt: error: {message}[^\n]*\n", result.stderr), result.stderr


# SmolLM2-135M-Instruct's greedy continuation of "Once upon a time" (float32 after
# dequantization; the same reference as test_default_model_generation.py).
REFERENCE_CONTINUATION = [28, 260, 2240, 282, 23324, 27108, 436, 253, 15114, 39228]


def test_generate_with_the_default_model_on_the_cpu():
    result = run_script("generate", "--prompt", "Once upon a time", "--max-tokens", "10",
                        "--device", "cpu")
    assert result.returncode == 0, result.stderr
    tokenizer = Tokenizer.from_gguf_metadata(GGUFFile(default_model_path()).metadata)
    assert tokenizer.decode(REFERENCE_CONTINUATION) in result.stdout
    assert re.search(r"^Prompt: 4 tokens, \d+\.\d{3} tokens-per-sec$", result.stdout, re.M)
    assert re.search(r"^Generation: 10 tokens, \d+\.\d{3} tokens-per-sec$", result.stdout, re.M)
    assert re.search(r"^Peak memory: \d+\.\d{3} GB$", result.stdout, re.M)
