"""The benchmark's command line on the CPU: bad arguments fail before any work, every section that
ran gets a plot panel, and no empty figure is ever written."""

import json

import pytest
import torch

from fp8ops import bench


def test_unknown_section_and_bad_paths_fail_first(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--cpu", "--sections", "bogus"])
    assert "unknown section(s) bogus" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="does not exist or is not writable"):
        bench.parse_args(["--cpu", "--json", str(tmp_path / "missing" / "b.json")])
    with pytest.raises(SystemExit, match="does not exist or is not writable"):
        bench.parse_args(["--cpu", "--plot", str(tmp_path / "missing" / "b.png")])


def test_help_is_plain_text(capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "--sections" in out


def test_cpu_run_plots_every_section(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    out, png = tmp_path / "b.json", tmp_path / "b.png"
    assert (
        bench.main(["--cpu", "--quick", "--sections", "per_token,block", "--json", str(out), "--plot", str(png)]) == 0
    )
    res = json.loads(out.read_text())
    assert set(res) >= {"per_token", "block"} and "silu" not in res
    assert png.stat().st_size > 0
    import matplotlib.image

    assert matplotlib.image.imread(str(png)).shape[1] > matplotlib.image.imread(str(png)).shape[0]  # two panels


def test_no_rows_means_no_figure(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    png = tmp_path / "empty.png"
    assert bench.plot({"device": "cpu", "torch": torch.__version__}, str(png)) is False
    assert not png.exists()


def test_gpu_results_plot_a_panel_per_section(tmp_path):
    """A GPU run's JSON (here a small hand-made one) plots one labelled line per variant."""
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    rows = [
        {"T": t, "G": 16, "D": d, "packed": p, "fp8ops_us": 1.0 + t, "compiled_lean_us": 2.0 + t}
        for t in (1, 4096)
        for d in (512, 4096)
        for p in (False, True)
    ]
    res = {"device": "NVIDIA H200", "group_major": rows, "indexer": [{"B": 1, "fp8ops_us": 1.4}]}
    png = tmp_path / "gpu.png"
    assert bench.plot(res, str(png)) is True
    assert png.stat().st_size > 0
