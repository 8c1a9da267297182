"""The benchmark's command line under bad input and interruption, without running a
model (fake workers and sections): every misuse is an argparse error (exit 2) that
names what was expected, a worker that prints after its result or fails or hangs is a
row with its reason (and the runs it finished), a stopped run kills its worker,
removes its spec file, ignores further signals and keeps a JSON that ``bench.report``
reads, output into a closed pipe ends quietly, and a half-written or truncated Hugging
Face export is not trusted."""
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))   # the repository's bench/
from bench import __main__ as bench  # noqa: E402
from bench import export_hf, generation, peers, report  # noqa: E402


def fake_python(tmp_path, body):
    """An executable that stands in for a worker's interpreter: run_worker calls it as
    ``python -m MODULE SPEC``, so the spec's path is $3."""
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def fake_peers_venv(tmp_path, worker_body):
    """A peers' venv whose python passes every import check (``python -c ...``) and
    runs ``worker_body`` as every worker."""
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    fake_python(tmp_path / "venv" / "bin", f'if [ "$1" = -c ]; then exit 0; fi\n{worker_body}')
    return tmp_path / "venv"


def start_bench_on_fake_peer(tmp_path, worker_body):
    """``python -m bench`` measuring only the llama.cpp row, whose worker is
    ``worker_body``; returns the process once that worker is started, and its pid."""
    spec_dir = tmp_path / "tmp"
    spec_dir.mkdir()
    env = dict(os.environ, TMPDIR=str(spec_dir))
    proc = subprocess.Popen([sys.executable, "-m", "bench", "--sections", "generation",
                             "--peers", "llama.cpp", "--engines", "llama.cpp q4_1",
                             "--peers-venv", str(fake_peers_venv(tmp_path, worker_body)),
                             "--out-dir", str(tmp_path / "out")],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    while "bench: generation: llama.cpp q4_1" not in proc.stderr.readline():
        assert proc.poll() is None, proc.stderr.read()
    worker = None
    for _ in range(200):   # the worker process the bench started
        worker = next((int(p) for p in os.listdir("/proc") if p.isdigit()
                       and _parent(int(p)) == proc.pid), None)
        if worker:
            break
        time.sleep(0.05)
    assert worker, "no worker process started"
    assert list(spec_dir.glob("metalrt-bench-*.json"))
    return proc, worker


def partial_row(runs):
    """A generation worker's progress line after ``len(runs)`` finished runs."""
    return {"version": "fake 1", "threads": "1", "prefill_tps": {"16": generation.summary(runs)},
            "decode_tps": generation.summary(runs), "decode_tokens": 8, "peak_memory_gb": 0.1,
            "greedy_tokens": [1, 2], "partial": True}


def bench_in_process(monkeypatch, tmp_path, *argv):
    """``bench.main`` of the ops section with op_benchmarks faked (no model runs):
    (exit code, the JSON written)."""
    for k in bench.worker_env(1):   # run() sets the thread variables: undone after the test
        if k.startswith(("METALRT_", "OMP_")):
            monkeypatch.setenv(k, os.environ.get(k, "1"))
    monkeypatch.setattr(bench, "op_benchmarks", lambda args: [])
    code = bench.main(["--sections", "ops", "--out-dir", str(tmp_path / "out"), *argv])
    [path] = list((tmp_path / "out").glob("*.json"))
    return code, json.loads(path.read_text())


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
    (["--sizes-models", "llama-3.2-1b:q4_0"],
     "--sizes-models: unknown sizes models ['llama-3.2-1b:q4_0']; known: llama-3.2-1b:q4_k_m"),
    (["--context-lengths", "128,4k"], "--context-lengths: expected comma-separated integers"),
    (["--context-lengths", "0,128"], "--context-lengths: expected context lengths in 1-"),
    (["--context-lengths", ","], "--context-lengths: expected context lengths in 1-"),
    (["--context-prefill", "0"], "--context-prefill must be in 1-"),
])
def test_bad_arguments_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        bench.parse(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_sizes_models_pick_the_named_models_in_their_order():
    args = bench.parse(["--sections", "sizes", "--sizes-models",
                        "qwen3-30b-a3b-8l:q4_k_m, llama-3.2-1b:q8_0"])
    assert bench.sizes.selected_models(args.sizes_models) == [
        ("llama-3.2-1b", "q8_0", None), ("qwen3-30b-a3b", "q4_k_m", 8)]
    assert bench.sizes.selected_models(bench.parse([]).sizes_models) == bench.sizes.MODELS


def test_a_sizes_run_writes_its_chart_next_to_its_json(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")   # without it the run warns (the next test)
    section = {"main_threads": 1, "threads": [1], "runs": 3,
               "full": {"prompt_lengths": [], "decode_tokens": 8}, "models": {"m q8_0": {"bytes_per_token": 10 ** 9}},
               "rows": [{"model": "m q8_0", "engine": "metalrt", "variant": "cpu", "threads": 1,
                         "decode_tps": {"median": 3.0, "min": 2.9, "max": 3.1}}]}
    monkeypatch.setattr(bench.sizes, "run", lambda args, save, run_worker, prompt_ids: section)
    for k in bench.worker_env(1):
        if k.startswith(("METALRT_", "OMP_")):
            monkeypatch.setenv(k, os.environ.get(k, "1"))
    bench.main(["--sections", "sizes", "--threads", "1", "--out-dir", str(tmp_path)])
    [path] = list(tmp_path.glob("*.json"))
    assert path.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    assert f"sizes chart: {path.with_suffix('.png')}" in capsys.readouterr().err
    # A section the chart cannot read (a scaled row without its bytes): a warning, no PNG.
    section["scaled"] = [{"model": "m", "engine": "metalrt", "threads": 1, "decode_tps_scaled": 1.0,
                          "per_layer_ms": 1.0, "fixed_ms": 1.0}]
    bench.main(["--sections", "sizes", "--threads", "1", "--out-dir", str(tmp_path / "b")])
    assert not list((tmp_path / "b").glob("*.png"))
    assert "no sizes chart: sizes chart: scaled row 0 lacks bytes_per_token" in capsys.readouterr().err


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
    proc, worker = start_bench_on_fake_peer(tmp_path, "exec sleep 30")
    try:
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) == 143, rest
    finally:
        proc.kill()
    assert "bench: stopped" in rest
    assert not _alive(worker)
    assert not list((tmp_path / "tmp").glob("metalrt-bench-*.json"))
    [path] = list((tmp_path / "out").glob("*.json"))
    # The layout of a complete run, said to be incomplete.
    result = json.loads(path.read_text())
    assert result["complete"] is False and "generation_partial" not in result
    # Every row before the llama.cpp one it was measuring.
    assert [f"{r['engine']} {r['variant']}" for r in result["generation"]["rows"]] == \
        bench.engine_rows()[:-1]
    assert result["generation"]["prompt_lengths"] == bench.FULL["prompt_lengths"]
    printed = subprocess.run([sys.executable, "-m", "bench.report", str(path)], cwd=ROOT,
                             capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    assert "(an incomplete run, stopped or still running" in printed.stdout
    assert "(no engine was measured)" in printed.stdout
    assert "* metalrt cpu: not measured in this run (--engines)" in printed.stdout


def _children():
    """This process's children that have not exited."""
    return {int(p) for p in os.listdir("/proc")
            if p.isdigit() and _parent(int(p)) == os.getpid() and _alive(int(p))}


def test_a_stop_while_the_worker_starts_kills_it(tmp_path, monkeypatch):
    """The stop signal arrives while the worker is being started: sent by the child
    itself before its exec, while the parent waits in Popen for the exec. That raised
    Stopped inside subprocess.run's Popen, after the fork, and left the worker running:
    the race behind the flaky SIGTERM test (its signal follows the worker's fork). An
    idle second thread may take the signal (the kernel gives a process-directed signal
    to any thread not blocking it), so blocking it in the main thread is no fix."""
    python = fake_python(tmp_path, "exec sleep 30")
    prepare = bench.die_with_parent

    def stop_the_parent():
        prepare()
        os.kill(os.getppid(), signal.SIGTERM)

    monkeypatch.setattr(bench, "die_with_parent", stop_the_parent)
    idle = threading.Event()
    threading.Thread(target=idle.wait, daemon=True).start()
    handlers = {s: signal.signal(s, bench._stop) for s in bench.STOP_SIGNALS}
    before = _children()
    try:
        with pytest.raises(bench.Stopped):
            bench.run_worker(python, "m", {}, 1, 30)
        left = _children() - before
    finally:
        idle.set()
        for s, handler in handlers.items():
            signal.signal(s, handler)
        for pid in _children() - before:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert left == set()


def test_signals_during_the_shutdown_are_ignored(tmp_path):
    proc, worker = start_bench_on_fake_peer(tmp_path, "exec sleep 30")
    try:
        proc.send_signal(signal.SIGTERM)
        # More stop signals, until it has exited: none may break into its shutdown.
        while proc.poll() is None:
            for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                proc.send_signal(s)
            time.sleep(0.001)
        rest = proc.stderr.read()
    finally:
        proc.kill()
    assert proc.returncode in (130, 143), rest
    assert "Traceback" not in rest and "Exception ignored" not in rest, rest
    assert "bench: stopped" in rest and not _alive(worker)


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
    result = {"quick": True, "complete": False,
              "environment": {"date": "d", "machine": "m", "threads": 1, "load_average_start": "0"},
              "generation": {"prompt_lengths": [16, 64], "decode_tokens": 8, "runs": 3,
                             "rows": [{"engine": "metalrt", "variant": "cpu",
                                       "reason": "failed (exit 1): x"}]}}
    text = report.render(result)
    assert "1 thread," in text and "* metalrt cpu: failed (exit 1): x" in text
    assert "(an incomplete run" in text and "WARNING" not in text
    # The keys a stopped run wrote before "complete" existed.
    old = {k: v for k, v in result.items() if k not in ("complete", "generation")}
    old.update(generation_partial=result["generation"]["rows"],
               generation_sizes={k: v for k, v in result["generation"].items() if k != "rows"})
    assert report.render(old) == text
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
    (out / export_hf.STAMP).write_text(json.dumps(dict(export_hf.stamp(str(gguf)),
                                                       files={"config.json": 2})))
    assert export_hf.is_current(str(gguf), out)
    gguf.write_bytes(b"GGUF2")                         # another model file
    assert not export_hf.is_current(str(gguf), out)


def test_export_whose_files_do_not_match_its_stamp_is_made_again(tmp_path, monkeypatch):
    made = []

    def fake_export(gguf, out):   # what save_pretrained leaves: a 0600 weights file
        made.append(out)
        (out / "config.json").write_text("{}")
        fd = os.open(out / "model.safetensors", os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"\0" * 1000)
        os.close(fd)

    monkeypatch.setattr(export_hf, "export", fake_export)
    gguf, out = tmp_path / "m.gguf", tmp_path / "export"
    gguf.write_bytes(b"GGUF")
    umask = os.umask(0o022)
    try:
        export_hf.export_once(str(gguf), out)
    finally:
        os.umask(umask)
    stamp = json.loads((out / export_hf.STAMP).read_text())
    assert stamp["exporter"] == export_hf.EXPORTER_VERSION
    assert stamp["files"] == {"config.json": 2, "model.safetensors": 1000}
    # Readable by others, as mkdir and open with umask 022 would make them.
    assert (out.stat().st_mode & 0o777, (out / "model.safetensors").stat().st_mode & 0o777) == \
        (0o755, 0o644)
    export_hf.export_once(str(gguf), out)
    assert len(made) == 1                              # current: kept
    with open(out / "model.safetensors", "r+b") as f:  # truncated since
        f.truncate(500)
    export_hf.export_once(str(gguf), out)
    assert len(made) == 2 and (out / "model.safetensors").stat().st_size == 1000
    older = dict(stamp, exporter=export_hf.EXPORTER_VERSION - 1)   # an older exporter's
    (out / export_hf.STAMP).write_text(json.dumps(older))
    assert not export_hf.is_current(str(gguf), out)


def test_report_into_a_closed_pipe_exits_quietly(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"quick": False, "environment": {
        "date": "d", "machine": "m", "threads": 1, "load_average_start": "0"}}))
    proc = subprocess.Popen([sys.executable, "-m", "bench.report", str(path)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()   # the reader is gone before the tables are written (`| head`)
    assert proc.wait(timeout=60) == report.SIGPIPE_EXIT
    assert proc.stderr.read() == b""


def test_bench_into_a_closed_pipe_exits_quietly(tmp_path, monkeypatch):
    read, write = os.pipe()
    os.close(read)
    with open(write, "w") as closed, monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", closed)
        code, result = bench_in_process(monkeypatch, tmp_path)
    assert code == report.SIGPIPE_EXIT
    assert result["complete"] is True and result["ops"] == []


def test_threads_above_the_cpu_count_warn_and_are_recorded(tmp_path, monkeypatch, capsys):
    cpus = os.cpu_count()
    args = bench.parse(["--threads", str(cpus + 1)])
    assert args.threads == cpus + 1
    [warning] = capsys.readouterr().err.splitlines()
    assert warning.startswith(f"python -m bench: warning: --threads {cpus + 1} is more than "
                              f"the {cpus} CPUs")
    bench.parse(["--threads", str(cpus)])
    assert capsys.readouterr().err == ""
    code, result = bench_in_process(monkeypatch, tmp_path, "--threads", str(cpus + 1))
    assert code == 0 and result["environment"]["threads_exceed_cpus"] is True
    idle = dict(result["environment"], load_average_start="0.00", load_average_end="0.00")
    assert (f"WARNING: the machine was busy (--threads {cpus + 1} on {cpus} CPUs: the engines' "
            "threads shared CPUs)") in report.render(dict(result, environment=idle))
    idle["threads_exceed_cpus"] = False
    assert "WARNING" not in report.render(dict(result, environment=idle))


def test_generation_worker_prints_every_finished_run(tmp_path, monkeypatch):
    """The real worker (bench.generation) on a fake engine that hangs in its third
    measured run: the row keeps the two runs it printed, without medians."""
    (tmp_path / "hanging_engine.py").write_text(
        "import sys, time\n"
        "from bench import generation\n"
        "class Hanging(generation.Engine):\n"
        "    version, threads, prefills = 'fake 1', '1', 0\n"
        "    def __init__(self, spec):\n"
        "        pass\n"
        "    def prefill(self, ids):\n"
        "        self.prefills += 1\n"
        "        if self.prefills > 3:   # the warm-up and two measured runs, then hangs\n"
        "            time.sleep(60)\n"
        "        return 7\n"
        "    def decode(self, token):\n"
        "        return token + 1\n"
        "generation.ENGINES['fake'] = Hanging\n"
        "sys.exit(generation.main(sys.argv[1:]))\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    spec = {"engine": "fake", "variant": "x", "runs": 3, "decode_tokens": 2,
            "prompts": {"4": [1, 2, 3, 4]}}
    row = bench.run_worker(sys.executable, "hanging_engine", spec, 1, 4)
    assert row["reason"] == "failed: no result within 4 s" and row["partial"] is True
    assert len(row["decode_tps"]["runs"]) == 2 and "median" not in row["decode_tps"]
    assert len(row["prefill_tps"]["4"]["runs"]) == 2 and row["greedy_tokens"] == [7, 8, 9]
    # Without the hang: every run, medians, and no "partial".
    progress = []
    monkeypatch.setitem(generation.ENGINES, "fake", _Counting)
    done = generation.run(spec, progress.append)
    assert [len(p["decode_tps"]["runs"]) for p in progress] == [1, 2]
    assert all(p["partial"] is True for p in progress) and "partial" not in done
    assert len(done["decode_tps"]["runs"]) == 3 and set(done["decode_tps"]) == \
        {"median", "min", "max", "runs"}


class _Counting(generation.Engine):
    version, threads = "fake 1", "1"

    def __init__(self, spec):
        pass

    def prefill(self, ids):
        return 7

    def decode(self, token):
        return token + 1


def test_failed_worker_keeps_the_runs_it_printed(tmp_path):
    line = json.dumps({"metalrt_bench_result": partial_row([10.0])})
    row = bench.run_worker(fake_python(tmp_path, f"echo '{line}'; exec sleep 30"), "m", {}, 1, 1)
    assert row == dict(partial_row([10.0]), reason="failed: no result within 1 s")
    row = bench.run_worker(fake_python(tmp_path, f"echo '{line}'; echo oops >&2; exit 9"),
                           "m", {}, 1, 30)
    assert row == dict(partial_row([10.0]), reason="failed (exit 9): oops")
    result = {"quick": True, "environment": {"date": "d", "machine": "m", "threads": 1,
                                             "load_average_start": "0"},
              "generation": {"prompt_lengths": [16], "decode_tokens": 8, "runs": 3, "rows": [
                  dict(partial_row([30.0, 20.0, 25.0]), engine="metalrt", variant="cpu"),
                  dict(row, engine="llama.cpp", variant="q4_1")]}}
    text = report.render(result)
    [llama] = [line.split("|")[1:-1] for line in text.splitlines()
               if line.startswith("| llama.cpp q4_1")]
    # No median of one run, so no ratio; the ids are still compared.
    assert [c.strip() for c in llama[2:]] == ["runs 10", "runs 10", "0.10", "-", "2/2"]
    assert "* llama.cpp q4_1: 1 of 3 runs, then failed (exit 9): oops" in text


def test_report_says_why_the_comparison_columns_are_empty():
    result = {"quick": True, "environment": {"date": "d", "machine": "m", "threads": 1,
                                             "load_average_start": "0"},
              "generation": {"prompt_lengths": [16], "decode_tokens": 8, "runs": 3, "rows": [
                  {"engine": "metalrt", "variant": "cpu",
                   "reason": "not measured in this run (--engines)"},
                  dict(partial_row([30.0, 20.0, 25.0]), engine="llama.cpp", variant="q4_1")]}}
    del result["generation"]["rows"][1]["partial"]
    text = report.render(result)
    assert ("metalrt-cpu / this and greedy ids = metalrt-cpu are - in every row: they compare "
            "a row with metalrt cpu's medians and ids, and it has no figures: not measured in "
            "this run (--engines).") in text
    result["generation"]["rows"][0] = dict(result["generation"]["rows"][1], engine="metalrt",
                                           variant="cpu")
    assert "are - in every row" not in report.render(result)


def test_import_error_comes_before_a_recorded_install_failure(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake_python(venv / "bin", 'echo "Traceback (most recent call last):" >&2; '
                              'echo "ImportError: libllama.so: cannot open shared object file" >&2; '
                              "exit 1")
    (venv / peers.STATUS_FILE).write_text(json.dumps(
        {"llama.cpp": {"installed": False, "reason": "pip install failed (exit 1): old"}}))
    reason = peers.availability(venv, ["llama.cpp"])["llama.cpp"]["reason"]
    assert reason.startswith("not installed (ImportError: libllama.so: cannot open shared "
                             "object file; run `python -m bench --install-peers --peers llama.cpp")
    assert reason.endswith(f"; {peers.STATUS_FILE} records an earlier install failure: "
                           "pip install failed (exit 1): old")


def test_a_source_build_with_other_settings_is_rebuilt_not_used(tmp_path):
    """A llama.cpp recorded as built with other settings (before AMX-INT8 was left out,
    say) is reported as not installed although it imports; install uninstalls it and
    builds it again without pip's wheel cache, then records the settings it used."""
    venv = fake_peers_venv(tmp_path, "exit 0")
    log = tmp_path / "pip.log"
    fake_python(venv / "bin", f'echo "$@" >> {log}; exit 0')
    llama = next(p for p in peers.PEERS if p.name == "llama.cpp")
    (venv / peers.STATUS_FILE).write_text(json.dumps({"llama.cpp": {"installed": True,
                                                                    "reason": ""}}))
    reason = peers.availability(venv, ["llama.cpp"])["llama.cpp"]["reason"]
    assert reason.startswith("not installed (built with unrecorded settings, not {"), reason
    assert "--install-peers --peers llama.cpp" in reason
    status = peers.install(venv, ["llama.cpp"])
    calls = log.read_text().splitlines()
    assert calls[0].endswith("pip --disable-pip-version-check uninstall -y -q llama-cpp-python")
    assert "install --no-cache-dir -c " in calls[1] and calls[1].endswith("llama-cpp-python[server]")
    assert status["llama.cpp"] == {"installed": True, "reason": "", "build_env": llama.build_env}
    assert peers.availability(venv, ["llama.cpp"])["llama.cpp"] == {"available": True, "reason": ""}
    peers.install(venv, ["llama.cpp"])   # the same settings: no second uninstall
    assert [c for c in log.read_text().splitlines() if " uninstall " in c] == calls[:1]


@pytest.mark.parametrize("record", ["not json", '{"llama.cpp": {"installed": false, "reason": "x"}}',
                                    '{"llama.cpp": {"installed": "false", "build_env": []}}'])
def test_a_source_build_not_recorded_with_these_settings_is_removed_first(tmp_path, record):
    """Whatever the record says (unreadable, a failed install, odd values), a copy of
    llama-cpp-python that pip would keep as "already satisfied" is uninstalled first, so
    an old build (say with AMX-INT8) is never recorded as built with these settings; a
    failed uninstall is the peer's failure, and nothing is installed over it."""
    venv = fake_peers_venv(tmp_path, "exit 0")
    log = tmp_path / "pip.log"
    fake_python(venv / "bin", f'echo "$@" >> {log}; exit 0')
    (venv / peers.STATUS_FILE).write_text(record)
    peers.install(venv, ["llama.cpp"])
    calls = log.read_text().splitlines()
    assert " uninstall " in calls[0] and " install " in calls[1]
    fake_python(venv / "bin", f'echo "$@" >> {log}; case "$*" in *uninstall*) echo busy >&2; exit 3;; esac; exit 0')
    (venv / peers.STATUS_FILE).write_text(record)
    status = peers.install(venv, ["llama.cpp"])
    assert status["llama.cpp"] == {"installed": False, "reason": "pip uninstall of the old build "
                                   "failed (exit 3): busy"}
    assert " install " not in log.read_text().splitlines()[-1]


def test_an_absurdly_nested_status_file_is_ignored(tmp_path):
    (tmp_path / peers.STATUS_FILE).write_text("[" * 100000 + "]" * 100000)
    assert peers.read_status(tmp_path) == {}


def test_llama_cpp_builds_without_amx_int8_on_x86():
    llama = next(p for p in peers.PEERS if p.name == "llama.cpp")
    assert llama.build_env["CMAKE_ARGS"] == "-DLLAVA_BUILD=OFF"
    if platform.machine() == "x86_64":
        assert llama.build_env["CFLAGS"] == llama.build_env["CXXFLAGS"] == "-mno-amx-int8"
    else:   # the flag is x86's: a Mac's clang would reject it
        assert "CFLAGS" not in llama.build_env and "CXXFLAGS" not in llama.build_env


def test_bench_documents_name_nothing_outside_the_repository():
    """The design notes and issues are not in the repository: bench/, its docs and the
    README's benchmark section say what they mean instead of citing them."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Benchmarks"):].split("\n## ")[0]
    texts = [section, (ROOT / "docs" / "benchmarks.md").read_text()]
    texts += [p.read_text() for p in sorted((ROOT / "bench").glob("*.py"))]
    for text in texts:
        assert not re.search(r"DESIGN|§|\bissues? #?\d", text), \
            re.search(r".*(DESIGN|§|\bissues? #?\d).*", text).group(0)
