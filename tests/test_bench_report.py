"""fastln.bench's report: the columns it promises, on a tiny run (no timing is checked)."""

import json

import pytest

from fastln import bench


def test_report_columns_and_json(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert bench.main(["--shapes", "4x64,3x100", "--impl", "fastln,floor", "--rounds", "1",
                       "--mode", "out,alloc", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert bench.HEADER in text
    assert "| float32 | out | 4×64 |" in text and "| float32 | alloc | 3×100 |" in text
    data = json.loads(out.read_text())
    rows = data["results"]
    assert len(rows) == 4
    assert all(set(r["us"]) == {"fastln", "floor"} and r["us"]["fastln"] > 0 for r in rows)


def test_threads_report_speedup_over_one_thread(capsys):
    assert bench.main(["--threads", "2", "--shapes", "8x64", "--impl", "fastln,floor",
                       "--rounds", "1", "--mode", "out"]) == 0
    text = capsys.readouterr().out
    assert bench.HEADER + " × 1 thread |" in text
    row = next(line for line in text.splitlines() if line.startswith("| float32 | out | 8×64"))
    assert len(row.strip("|").split("|")) == 11
    assert "× 1 thread geomean" in text


@pytest.mark.parametrize("bad", [["--threads", "0"], ["--impl", "nope"], ["--mode", "both"]])
def test_bad_arguments(bad):
    with pytest.raises(SystemExit):
        bench.main(bad)
