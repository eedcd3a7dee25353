"""fastln.bench's report: the columns it promises, on a tiny run (no timing is checked)."""

import json

import numpy as np
import pytest

import fastln
from fastln import bench


def test_report_columns_and_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert bench.main(["--shapes", "4x64,3x100", "--impl", "fastln,floor", "--rounds", "1",
                       "--mode", "out,alloc", "--json", str(out), "--no-accuracy"]) == 0
    text = capsys.readouterr().out
    assert bench.HEADER in text
    assert "| float32 | out | 4×64 |" in text and "| float32 | alloc | 3×100 |" in text
    data = json.loads(out.read_text())
    rows = data["results"]
    assert len(rows) == 4
    assert all(set(r["us"]) == {"fastln", "floor"} and r["us"]["fastln"] > 0 for r in rows)


def test_report_ends_with_the_accuracy_tables(tmp_path, capsys):
    # --quick: float32 rows of 64 and 768 values (the full report adds 65536).
    out = tmp_path / "r.json"
    assert bench.main(["--quick", "--shapes", "4x64", "--impl", "fastln,floor", "--rounds", "1",
                       "--mode", "out", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Accuracy, float32 rows" in text and "float64 rows, against" in text
    assert "| c=1e+06, s=1 | 768 |" in text and "| c=1e+15, s=1 | 768 |" in text
    acc = json.loads(out.read_text())["accuracy"]
    assert {r["cols"] for r in acc["float32"]} == {64, 768}
    # The bars the tests hold fastln to (test_layer_norm.py): 1e-5 float32, 1e-13 float64.
    assert max(r["fastln"] for r in acc["float32"]) <= 1e-5
    assert max(r["fastln"] for r in acc["float64"]) <= 1e-13
    # The backward table: fastln's dx and dweight at the bars of test_backward.py.
    assert "layer_norm_backward's dx and dweight" in text
    assert "| float64 | c=1e+15, s=1 | 768 |" in text
    for r in acc["backward"]:
        assert max(r["fastln"]) <= (1e-13 if r["dtype"] == "float64" else 1e-5), r


def test_threads_report_speedup_over_one_thread(capsys):
    assert bench.main(["--threads", "2", "--shapes", "8x64", "--impl", "fastln,floor",
                       "--rounds", "1", "--mode", "out", "--no-accuracy"]) == 0
    text = capsys.readouterr().out
    assert bench.HEADER + " × 1 thread |" in text
    row = next(line for line in text.splitlines() if line.startswith("| float32 | out | 8×64"))
    assert len(row.strip("|").split("|")) == 11
    assert "× 1 thread geomean" in text


@pytest.mark.parametrize("bad", [
    ["--threads", "0"], ["--impl", "nope"], ["--mode", "both"],
    ["--shapes", "abc"], ["--shapes", "768"], ["--shapes", "1x768x3"], ["--shapes", "2x8,"],
    ["--shapes=-1x8"], ["--shapes=0x8"], ["--shapes=4x0"],
    ["--shapes", "2x8", "--rounds", "0"], ["--shapes", "2x8", "--rounds", "-5"],
    ["--quick", "--full"],
    ["--shapes", "2x8", "--rounds", "1", "--no-accuracy", "--json", "/nonexistent/dir/r.json"],
    ["--shapes", "2x8", "--rounds", "1", "--no-accuracy", "--plot", "/nonexistent/dir/r.png"],
])
def test_bad_arguments(bad, capsys):
    # argparse's exit (status 2, a message naming the option), not a traceback or a silent run.
    with pytest.raises(SystemExit) as e:
        bench.main(bad)
    assert e.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_one_thread_column_holds_its_setting_for_a_whole_batch(monkeypatch):
    # fastln_1t's calls run on one thread, set once a batch outside the clock: set around each
    # call, the settings' cost (about 1 us) showed as a speedup from threads at 1x768.
    if not fastln.runtime_info()["openmp"]:
        pytest.skip("a build without OpenMP runs one thread whatever is set")
    x, w, b = bench.inputs(4, 64, np.float32)
    seen, sets = [], []
    real_ln, real_set = fastln.layer_norm, fastln.set_num_threads

    def ln(*args, **kw):
        seen.append(fastln.get_num_threads())
        return real_ln(*args, **kw)

    def set_threads(n):
        sets.append(n)
        real_set(n)

    monkeypatch.setattr(fastln, "layer_norm", ln)
    monkeypatch.setattr(fastln, "set_num_threads", set_threads)
    real_set(2)
    try:
        f = bench.make_impl("fastln_1t", x, w, b, True, 2)
        bench.time_interleaved({"fastln_1t": f}, rounds=3, round_time=0.001)
        assert fastln.get_num_threads() == 2
    finally:
        real_set(0)
    assert set(seen) == {1}
    assert len(seen) > 20 and len(sets) < len(seen) / 4


def test_json_records_the_threads_the_run_used(tmp_path):
    out = tmp_path / "r.json"
    fastln.set_num_threads(2)  # what the process had before: not what --threads 1 ran with
    try:
        assert bench.main(["--threads", "1", "--shapes", "2x8", "--impl", "fastln", "--rounds",
                           "1", "--mode", "out", "--no-accuracy", "--json", str(out)]) == 0
    finally:
        fastln.set_num_threads(0)
    assert json.loads(out.read_text())["runtime"]["num_threads"] == 1


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_16bit_rows_with_a_copy_floor(name, capsys):
    if name == "bfloat16":
        pytest.importorskip("ml_dtypes")
    assert bench.main(["--dtype", name, "--shapes", "4x64", "--impl", "fastln,floor,numpy",
                       "--rounds", "1", "--mode", "out,alloc", "--no-accuracy"]) == 0
    text = capsys.readouterr().out
    assert f"| {name} | out | 4×64 |" in text and f"| {name} | alloc | 4×64 |" in text
    assert f"{name} out: time/floor geomean" in text


def test_16bit_floor_is_a_copy(monkeypatch):
    # A copy into a preallocated y in both modes: the floor is the pass into y whatever the mode.
    x, w, b = bench.inputs(3, 40, bench.parse_dtype("float16"))
    seen, real = [], np.copyto

    def copyto(dst, src):
        seen.append((dst, src))
        real(dst, src)

    monkeypatch.setattr(np, "copyto", copyto)
    for out in (True, False):
        f = bench.make_impl("floor", x, w, b, out, 1)
        seen.clear()
        f()
        f()
        assert len(seen) == 2 and seen[0][0] is seen[1][0] and seen[0][1] is x
        assert seen[0][0].tobytes() == x.tobytes()


def test_floor_never_allocates():
    # "/ floor" in alloc mode compares an allocating call with the pass into y (np.multiply's
    # allocating form pays a fresh output's page faults, which fastln's output cache does not).
    x, w, b = bench.inputs(3, 40, np.float32)
    for out in (True, False):
        f = bench.make_impl("floor", x, w, b, out, 1)
        first = f()
        assert f() is first and np.array_equal(first, x * 1.5)


def test_calibration_is_not_a_round(monkeypatch):
    # The best time is the best interleaved round's: each fn's calibration batches run alone, so a
    # fast calibration must not stand in for the rounds.
    ticks = iter(range(10**6))
    clock = lambda: next(ticks) * 1e-3  # noqa: E731 (1 ms a tick)
    cal = {"a": 0}

    def a():
        return None

    def fake_calibrate(fn, target, clock):
        cal["a"] += 1
        return 1, 1e-9  # one call a round, and a calibration far faster than any round
    monkeypatch.setattr(bench, "_calibrate", fake_calibrate)
    best = bench.time_interleaved({"a": a}, rounds=3, round_time=0.001, clock=clock)
    assert cal["a"] == 1
    assert best["a"] == pytest.approx(1e-3)  # one tick between a round's two clock readings


def test_torch_runs_in_inference_mode_held_for_a_batch():
    torch = pytest.importorskip("torch")
    x, w, b = bench.inputs(4, 64, np.float32)
    f = bench.make_impl("torch", x, w, b, True, 1)
    seen = []
    real = f.fn
    f.fn = lambda: (seen.append(torch.is_inference_mode_enabled()), real())[1]
    bench.time_interleaved({"torch": f}, rounds=3, round_time=0.001)
    assert seen and all(seen)
    assert not torch.is_inference_mode_enabled()  # left after each batch
    y = f()
    assert np.allclose(y.numpy(), fastln.layer_norm(x, w, b), atol=1e-5)


def test_json_is_strict_and_has_the_printed_ratios(tmp_path, monkeypatch):
    # A NaN among the accuracy figures (torch's output at c=1e30) is null in the file, which a
    # strict JSON parser then reads; each row carries the ratios the table prints.
    from fastln import _accuracy

    real = _accuracy.measure

    def with_nan(**kw):
        rows = real(**kw)
        rows[0][key] = float("nan")
        return rows

    key = "torch" if "torch" in real(lengths=(64,))[0] else "fastln"  # torch may not be installed

    monkeypatch.setattr(_accuracy, "measure", with_nan)
    out = tmp_path / "r.json"
    assert bench.main(["--quick", "--shapes", "4x64", "--impl", "fastln,floor,numpy", "--rounds",
                       "1", "--mode", "out", "--json", str(out)]) == 0

    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")

    data = json.loads(out.read_text(), parse_constant=refuse)
    assert data["accuracy"]["float32"][0][key] is None
    row = data["results"][0]
    us = row["us"]
    assert row["per_floor"] == pytest.approx(us["fastln"] / us["floor"])
    assert row["speedup"]["numpy"] == pytest.approx(us["numpy"] / us["fastln"])
    assert row["gbps"] == pytest.approx(2 * 4 * 64 * 4 / (us["fastln"] * 1e-6) / 1e9)
    assert data["versions"]["numpy"] == np.__version__ and data["rounds"] == 1


def test_plot_of_shapes_with_one_d_each(tmp_path, capsys):
    # --quick's shapes share no N: the plot is then throughput against the bytes of x.
    pytest.importorskip("matplotlib")
    out = tmp_path / "q.png"
    assert bench.main(["--shapes", "4x64,2x100", "--impl", "fastln,floor", "--rounds", "1",
                       "--mode", "out", "--no-accuracy", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {out}" in capsys.readouterr().out


def test_one_thread_column_needs_threads(capsys):
    assert bench.main(["--shapes", "4x64", "--impl", "fastln,fastln_1t,floor", "--rounds", "1",
                       "--mode", "out", "--no-accuracy"]) == 0
    text = capsys.readouterr().out
    assert "fastln_1t left out" in text and "× 1 thread" not in text


def test_peer_without_a_kernel_is_left_out(monkeypatch, capsys):
    def unsupported(*args):
        raise bench.Unsupported("no kernel")

    real = bench.make_impl
    monkeypatch.setattr(bench, "make_impl",
                        lambda name, *a: unsupported() if name == "numpy" else real(name, *a))
    rows = bench.run([(4, 64), (2, 32)], [bench.parse_dtype("float16")], ["out"], 1,
                     ["fastln", "floor", "numpy"], 1, 0.001)
    assert capsys.readouterr().out.count("note: no kernel") == 1
    assert all(set(r["us"]) == {"fastln", "floor"} for r in rows)


def test_unknown_dtype_is_an_argument_error():
    with pytest.raises(SystemExit):
        bench.main(["--dtype", "int8"])


def test_sweeps_keep_each_implementation_best(monkeypatch, capsys, tmp_path):
    # Fake timings, in the order measured: 4x64 then 3x100 in sweep 1, again in sweep 2. In each
    # row one implementation's best comes from each sweep, so a row from one sweep alone, or
    # each implementation's best taken across shapes, would show other numbers.
    times = iter([{"fastln": 3e-6, "floor": 1e-6}, {"fastln": 2e-6, "floor": 4e-6},
                  {"fastln": 2.5e-6, "floor": 6e-6}, {"fastln": 7e-6, "floor": 3e-6}])
    calls = []

    def fake(fns, rounds, round_time):
        calls.append(sorted(fns))
        return next(times)

    monkeypatch.setattr(bench, "time_interleaved", fake)
    out = tmp_path / "r.json"
    assert bench.main(["--shapes", "4x64,3x100", "--impl", "fastln,floor", "--mode", "out",
                       "--sweeps", "2", "--json", str(out), "--no-accuracy"]) == 0
    assert len(calls) == 4
    text = capsys.readouterr().out
    assert "best round of 2 sweeps" in text
    # One row a shape, printed once, after the last sweep.
    assert text.count("| float32 | out | 4×64 |") == 1
    data = json.loads(out.read_text())
    assert data["sweeps"] == 2
    us = {(r["n"], r["d"]): r["us"] for r in data["results"]}
    assert us[(4, 64)] == pytest.approx({"fastln": 2.5, "floor": 1.0})
    assert us[(3, 100)] == pytest.approx({"fastln": 2.0, "floor": 3.0})


def test_sweeps_must_be_positive():
    with pytest.raises(SystemExit):
        bench.main(["--sweeps", "0"])


def test_half_bound_probe_builds_and_runs(tmp_path):
    """bench/half_bound.c, the float16 speed bound README cites, still compiles and runs."""
    import os
    import platform
    import shutil
    import subprocess

    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench",
                       "half_bound.c")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("needs a C compiler on x86-64")
    if not os.path.exists(src):
        pytest.skip("bench/ not shipped here")
    exe = tmp_path / "half_bound"
    subprocess.run([cc, "-O2", "-Wall", "-Werror", src, "-o", str(exe)], check=True)
    r = subprocess.run([str(exe), "2", "32", "1"], capture_output=True, text=True)
    if r.returncode == 1 and "needs AVX2" in r.stderr:
        pytest.skip("CPU without AVX2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("2x32, best of 1 rounds")
    times = [float(line.split(":")[1]) for line in lines[1:]]
    assert len(times) >= 2 and all(t > 0 for t in times)
    bad = subprocess.run([str(exe), "2", "20"], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage" in bad.stderr
