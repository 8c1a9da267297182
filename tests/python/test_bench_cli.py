"""The benchmark's command line under bad input and interruption (issue 6): every
misuse is an argparse error (exit 2) that names what was expected, a worker that
prints after its result or fails or hangs is a row with its reason, a stopped run
kills its worker, removes its spec file and keeps a JSON that ``bench.report`` reads,
and a half-written Hugging Face export is not trusted."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))   # the repository's bench/
from bench import __main__ as bench  # noqa: E402
from bench import export_hf, peers, report  # noqa: E402


def fake_python(tmp_path, body):
    """An executable that stands in for a worker's interpreter: run_worker calls it as
    ``python -m MODULE SPEC``, so the spec's path is $3."""
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("argv, message", [
    (["--engines", "metalrt gpu"], "unknown --engines rows ['metalrt gpu']"),
    (["--op-repeats", "0"], "--op-repeats must be >= 3"),
    (["--runs", "2"], "--runs must be >= 3"),
    (["--threads", "0"], "--threads must be in 1-1024, got 0"),
    (["--threads", "5000"], "--threads must be in 1-1024, got 5000"),
    (["--timeout", "0"], "--timeout must be in (0, 604800] seconds"),
    (["--timeout", "inf"], "--timeout must be in (0, 604800] seconds, got inf"),
    (["--engines", ""], "--engines names no row"),
    (["--engines", " , "], "--engines names no row"),
    (["--sections", ""], "--sections names no section"),
    (["--engines", "mlx fp32", "--peers", "transformers"],
     "--engines rows ['mlx fp32'] belong to peers that --peers leaves out"),
    (["--peers", "vllm"], "unknown peers ['vllm']"),
    (["--sections", "speed"], "unknown sections ['speed']"),
])
def test_bad_arguments_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        bench.parse(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_paths_are_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = bench.parse(["--peers-venv", "venv", "--out-dir", "out"])
    assert args.peers_venv == tmp_path / "venv" and args.out_dir == tmp_path / "out"
    monkeypatch.setenv("METALRT_BENCH_VENV", "rel")
    assert peers.default_venv() == tmp_path / "rel"


def test_unwritable_out_dir_is_an_error_not_a_traceback(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert bench.main(["--out-dir", str(blocker / "sub")]) == 2
    assert f"cannot write results in {blocker / 'sub'}" in capsys.readouterr().err


def test_runs_in_the_same_second_get_their_own_file(tmp_path):
    paths = {bench.new_result_path(tmp_path) for _ in range(3)}
    assert len(paths) == 3 and all(p.exists() for p in paths)


def test_worker_output_after_its_result_is_ignored(tmp_path):
    python = fake_python(tmp_path, 'echo "loading..."; echo \'{"metalrt_bench_result": {"decode": 1}}\'; '
                                   'echo "[1, 2]"; echo \'{"event": "telemetry"}\'; echo "bye"')
    assert bench.run_worker(python, "bench.generation", {}, 1, 30) == {"decode": 1}


def test_worker_output_that_is_not_utf8_is_a_reason_not_a_crash(tmp_path):
    python = fake_python(tmp_path, r'printf "token: \377\376\n" >&2; exit 1')
    assert bench.run_worker(python, "m", {}, 1, 30) == {"reason": "failed (exit 1): token: \ufffd\ufffd"}


def test_failed_worker_is_a_row_with_its_last_words(tmp_path):
    record = tmp_path / "spec-path"
    python = fake_python(tmp_path, f'echo "$3" > {record}; echo "Traceback" >&2; '
                                   'echo "  ValueError:   bad   model" >&2; exit 3')
    result = bench.run_worker(python, "bench.generation", {"x": 1}, 1, 30)
    assert result == {"reason": "failed (exit 3): Traceback / ValueError: bad model"}
    assert not Path(record.read_text().strip()).exists()   # the spec file is removed


def test_silent_and_hanging_workers_are_rows_with_a_reason(tmp_path):
    assert bench.run_worker(fake_python(tmp_path, "exit 0"), "m", {}, 1, 30) == \
        {"reason": "failed (exit 0): no result printed"}
    start = time.time()
    assert bench.run_worker(fake_python(tmp_path, "sleep 30"), "m", {}, 1, 0.5) == \
        {"reason": "failed: no result within 0.5 s"}
    assert time.time() - start < 10


def test_sigterm_kills_the_worker_and_keeps_the_partial_result(tmp_path):
    spec_dir = tmp_path / "tmp"
    spec_dir.mkdir()
    out = tmp_path / "out"
    env = dict(os.environ, METALRT_BENCH_VENV=str(tmp_path / "no-peers"), TMPDIR=str(spec_dir))
    proc = subprocess.Popen([sys.executable, "-m", "bench", "--sections", "generation",
                             "--engines", "metalrt cpu", "--out-dir", str(out)],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert "bench: generation: metalrt cpu" in proc.stderr.readline()
        worker = None
        for _ in range(200):   # the worker process the bench started
            worker = next((int(p) for p in os.listdir("/proc") if p.isdigit()
                           and _parent(int(p)) == proc.pid), None)
            if worker:
                break
            time.sleep(0.05)
        assert worker, "no worker process started"
        assert list(spec_dir.glob("metalrt-bench-*.json"))
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 143, rest
    finally:
        proc.kill()
    assert "bench: stopped" in rest
    assert not _alive(worker)
    assert not list(spec_dir.glob("metalrt-bench-*.json"))
    [path] = list(out.glob("*.json"))
    printed = subprocess.run([sys.executable, "-m", "bench.report", str(path)], cwd=ROOT,
                             capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    assert "stopped during the generation section" in printed.stdout
    assert "(no engine was measured)" in printed.stdout


def _parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_report_of_a_partial_result_without_figures():
    result = {"quick": True, "environment": {"date": "d", "machine": "m", "threads": 1,
                                             "load_average_start": "0"},
              "generation_partial": [{"engine": "metalrt", "variant": "cpu",
                                      "reason": "failed (exit 1): x"}],
              "generation_sizes": {"prompt_lengths": [16, 64], "decode_tokens": 8, "runs": 3}}
    text = report.render(result)
    assert "1 thread," in text and "* metalrt cpu: failed (exit 1): x" in text
    assert "WARNING" not in text
    busy = dict(result, environment=dict(result["environment"], cpus=2,
                                         load_average_start="3.50 1.00 0.50"))
    assert "WARNING: the machine was busy (load average 3.50 on 2 CPUs at the start)" in \
        report.render(busy)


@pytest.mark.parametrize("content, message", [
    ("not json", "is not a result of python -m bench (JSONDecodeError"),
    ("[1, 2]", "is not a result of python -m bench (TypeError"),
    ("{}", "is not a result of python -m bench (KeyError"),
])
def test_report_of_a_file_that_is_not_a_result(tmp_path, content, message, capsys):
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(SystemExit) as stop:
        report.main([str(path)])
    assert stop.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        report.main([str(tmp_path / "missing.json")])
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.parametrize("content", ["[1]", '"text"', '{"mlx": 3}', "{"])
def test_peer_status_that_is_not_an_object_is_ignored(tmp_path, content):
    (tmp_path / peers.STATUS_FILE).write_text(content)
    assert peers.read_status(tmp_path) == {}


def test_peers_not_installed_say_how_to_install_them(tmp_path):
    state = peers.availability(tmp_path / "none", peers.peer_names())
    assert set(state) == set(peers.peer_names())
    for s in state.values():
        assert not s["available"]
        assert f"--peers-venv {tmp_path / 'none'}" in s["reason"]


def test_mlx_brings_the_exporter_along():
    assert peers.with_exporter(["mlx"]) == ["mlx", "transformers"]
    assert peers.with_exporter(["llama.cpp"]) == ["llama.cpp"]


def test_half_written_export_is_not_current(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    out = tmp_path / "export"
    out.mkdir()
    (out / "config.json").write_text("{}")          # what an interrupted export leaves
    assert not export_hf.is_current(str(gguf), out)
    (out / export_hf.STAMP).write_text(json.dumps(export_hf.stamp(str(gguf))))
    assert export_hf.is_current(str(gguf), out)
    gguf.write_bytes(b"GGUF2")                         # another model file
    assert not export_hf.is_current(str(gguf), out)
