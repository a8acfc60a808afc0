"""``mcu_npu.compare`` and ``mcu_npu.sweep`` (``mcu_npu.grid``): a grid of compiles run in
spawned worker processes or on Ray gives the rows a compile in this process gives; a
failing factory, a crashing worker and a target that cannot take the request are rows, not
crashes; the Pareto front keeps exactly the non-dominated rows; the commands print the
table, write the page and refuse bad input in one line, writing nothing.

The models are ``tests/grid_models.py``'s small factories."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest
import torch

import mcu_npu
from mcu_npu.errors import ConfigError
from mcu_npu.grid import Row, compare, pareto_front, sweep
from mcu_npu.grid.run import Grid, grid_from_json
from mcu_npu.grid.table import format_table

from grid_models import tiny_cnn
from helpers import run_cli

HERE = Path(__file__).resolve().parent
MODELS = str(HERE / "grid_models.py")
TARGETS = ["corstone-300", "ethos-u85-256"]


def _row(name, latency, sqnr, ram, fits=True, error="", **kw) -> Row:
    return Row(model=name, target="t", precision="int8", memory="auto", fits=fits,
               latency_us=latency, sqnr_db=sqnr, ram_bytes=ram, error=error,
               **({"npu_us": latency / 2, "flash_bytes": 1000, "ops_on_npu": 3,
                   "ops_total": 3, "partitions": 1, "memory_placement": "sram"} | kw))


# -- the Pareto front, on rows made by hand ---------------------------------------------------
def test_pareto_front_keeps_exactly_the_non_dominated_rows():
    a = _row("a", 100.0, 40.0, 5000)   # fastest
    b = _row("b", 200.0, 45.0, 5000)   # more accurate, slower: kept
    c = _row("c", 200.0, 44.0, 5000)   # b is as fast, as small and more accurate: dropped
    d = _row("d", 300.0, 45.0, 1000)   # smallest RAM: kept though slower than b
    e = _row("e", 300.0, 45.0, 1000)   # the same figures as d: neither dominates, both kept
    f = _row("f", 50.0, 50.0, 100, fits=False)   # would dominate all, but does not fit
    g = _row("g", 10.0, 99.0, 10, error="ConfigError: no")    # failed
    h = _row("h", 10.0, None, 10)      # no SQNR: not a candidate
    front = pareto_front([a, b, c, d, e, f, g, h])
    assert [r.model for r in front] == ["a", "b", "d", "e"]
    # one objective flipped: the slowest rows win
    slow = pareto_front([a, b, c], objectives=(("latency_us", "max"),))
    assert [r.model for r in slow] == ["b", "c"]
    with pytest.raises(ValueError, match="'min' or 'max'"):
        pareto_front([a], objectives=(("latency_us", "lowest"),))


def test_the_table_marks_the_front_and_shows_errors_and_the_page_is_self_contained():
    rows = [_row("a", 100.0, 40.0, 5000), _row("c", 200.0, 39.0, 6000),
            Row(model="bad", target="t", precision="int8", memory="auto",
                error="UnsupportedModelError: exporting the model failed")]
    grid = Grid(rows, "compare: three")
    text = str(grid)
    table = format_table(rows, grid.front)
    assert table in text
    lines = {line[2:].split()[0]: line for line in table.splitlines()
             if line[2:].split()[:1] in (["a"], ["c"], ["bad"])}
    assert lines["a"].startswith("* a") and lines["c"].startswith("  c")
    assert "error: UnsupportedModelError: exporting the model failed" in lines["bad"]
    assert "2/3 compiled" in text and "a on t (int8, memory sram): 100.0 us" in text
    html = grid.to_html()
    assert html.count("<svg") == 2 and "<script" not in html and "http" not in \
        html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "exporting the model failed" in html
    back = grid_from_json(grid.to_json())
    assert back.rows == rows and [r.model for r in back.front] == ["a"]


def test_the_scratch_column_shows_only_where_a_row_does_not_fit():
    """The NPU's scratch gets a column when some compiled row does not fit (telling its
    working memory from its buffers), and none when every row fits."""
    fitting = [_row("a", 100.0, 40.0, 5000, scratch_bytes=2048),
               _row("b", 90.0, 40.0, 6000, scratch_bytes=4096)]
    assert "scratch KiB" not in format_table(fitting)
    short = [fitting[0], _row("b", 90.0, 40.0, 900_000, fits=False, scratch_bytes=512_000)]
    table = format_table(short)
    head, line = table.splitlines()[1], table.splitlines()[-1]
    assert "scratch KiB" in head
    end = head.index("scratch KiB") + len("scratch KiB")  # numbers are right-aligned
    assert line[end - len("500.0"):end] == "500.0"


# -- the grid in worker processes, on Ray and in this process ---------------------------------
@pytest.fixture(scope="module")
def pool_grid():
    """tiny_cnn and a failing factory on two targets, two spawned worker processes."""
    seen = []
    grid = sweep([f"{MODELS}:tiny_cnn", f"{MODELS}:broken"], TARGETS, workers=2,
                 progress=False, on_row=seen.append)
    return grid, seen


@pytest.mark.slow
@pytest.mark.xdist_group("grid")
def test_sweep_in_worker_processes_gives_this_process_compile(pool_grid):
    grid, seen = pool_grid
    assert [(r.model, r.target) for r in grid.rows] == [
        ("tiny_cnn", t) for t in TARGETS] + [("broken", t) for t in TARGETS]
    assert sorted(map(id, seen)) == sorted(map(id, grid.rows))  # each row streamed once
    for r in grid.rows[2:]:
        assert r.error == (f"ConfigError: the model factory {MODELS}:broken failed: "
                           f"RuntimeError: this factory cannot build its model")
    model, example, calibration = tiny_cnn()
    here = compare(model, example, TARGETS, calibration, progress=False)
    assert [dataclasses.replace(r, model="tiny_cnn") for r in here.rows] == grid.rows[:2]
    # the row's figures are the compile's own
    prog = mcu_npu.compile(model, example, target=TARGETS[0], calibration=calibration,
                           progress=False)
    s, row = prog.report.summary, grid.rows[0]
    assert (row.latency_us, row.ram_bytes, row.flash_bytes, row.sqnr_db, row.ops_on_npu,
            row.memory_placement, row.pte_bytes) == \
        (s["latency_us"], s["ram_bytes"], s["flash_bytes"], s["sqnr_db"], s["ops_on_npu"],
         s["memory_placement"], len(prog.buffer))
    with torch.no_grad():
        agree = sum(int(model(*c).argmax(-1) == prog.run(*c)[0].argmax(-1))
                    for c in calibration)
    assert row.top1_agreement == agree / len(calibration) and row.top1_samples == 8


def test_a_row_keeps_the_compiles_own_warnings():
    """A row keeps the first line of each mcu-npu warning its compile raised (on imxrt700
    without the eIQ Neutron SDK: the partitions compiled by the reference compiler)."""
    model, example, calibration = tiny_cnn()
    (row,) = compare(model, example, ["imxrt700"], calibration, progress=False).rows
    assert any("compiled by the reference compiler" in w for w in row.warnings), row.warnings


@pytest.mark.slow
@pytest.mark.xdist_group("grid")
def test_ray_gives_the_rows_the_process_pool_gives(pool_grid):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(sys.path)}})
    try:
        on_ray = sweep([f"{MODELS}:tiny_cnn", f"{MODELS}:broken"], TARGETS,
                       executor="ray", progress=False)
    finally:
        ray.shutdown()
    assert on_ray.rows == pool_grid[0].rows


def test_a_crashed_worker_is_its_own_row_and_the_others_are_run_again():
    grid = sweep([f"{MODELS}:crash", f"{MODELS}:broken"], ["corstone-300"], workers=2,
                 progress=False)
    crashed, broken = grid.rows
    assert crashed.error.startswith("the worker process died compiling this cell")
    assert broken.error.endswith("RuntimeError: this factory cannot build its model")


def test_a_cell_past_its_timeout_is_stopped_and_is_its_own_row():
    """With ``timeout`` each cell runs in a process of its own: one that never ends is
    stopped at its deadline and its row says so; the others' rows are as usual, a
    factory's failure and a crash included."""
    grid = sweep([f"{MODELS}:hang", f"{MODELS}:broken", f"{MODELS}:crash"], ["corstone-300"],
                 workers=2, progress=False, timeout=3)
    hung, broken, crashed = grid.rows
    assert hung.error == "timed out: still compiling after 3 s, stopped (timeout=)"
    assert broken.error.endswith("RuntimeError: this factory cannot build its model")
    assert crashed.error.startswith("the worker process died compiling this cell")


@pytest.mark.slow
@pytest.mark.xdist_group("grid")
def test_a_timed_cell_gives_the_row_of_the_pool(pool_grid):
    """A cell within its timeout gives the row the process pool gives."""
    timed = sweep([f"{MODELS}:tiny_cnn"], TARGETS[:1], progress=False, timeout=600)
    assert timed.rows == pool_grid[0].rows[:1]


def test_bad_grid_arguments_are_config_errors(monkeypatch):
    model, example, _ = tiny_cnn()
    with pytest.raises(ConfigError, match="unknown target 'nope'"):
        sweep([f"{MODELS}:tiny_cnn"], ["nope"])
    for bad in (0, -1.0, float("inf"), "10", True):
        with pytest.raises(ConfigError, match="timeout is the seconds a cell may compile"):
            sweep([f"{MODELS}:tiny_cnn"], TARGETS, timeout=bad)
    with pytest.raises(ConfigError, match="timeout= stops a cell's process"):
        sweep([f"{MODELS}:tiny_cnn"], TARGETS, executor="serial", timeout=5)
    with pytest.raises(ConfigError, match="has no function 'missing'"):
        sweep([f"{MODELS}:missing"], TARGETS)
    with pytest.raises(ConfigError, match="not sent to worker processes"):
        sweep([model], TARGETS)
    with pytest.raises(ConfigError, match="pass its factory instead"):
        compare(model, example, TARGETS, executor="process")
    with pytest.raises(ConfigError, match="unknown executor 'threads'"):
        sweep([f"{MODELS}:tiny_cnn"], TARGETS, executor="threads")
    with pytest.raises(ConfigError, match="unknown precision 'int4'"):
        sweep([f"{MODELS}:tiny_cnn"], TARGETS, precisions=["int8", "int4"])
    with pytest.raises(ConfigError, match="unknown memory placement 'disk'"):
        compare(f"{MODELS}:tiny_cnn", targets=TARGETS, memory="disk")
    with pytest.raises(ConfigError, match="workers must be a positive"):
        sweep([f"{MODELS}:tiny_cnn"], TARGETS, workers=0)
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'mcu-npu\[ray\]'"):
        sweep([f"{MODELS}:tiny_cnn"], TARGETS, executor="ray")


# -- the commands -------------------------------------------------------------------------------
@pytest.mark.slow
def test_compare_command_prints_the_table_and_writes_the_page(tmp_path):
    page = tmp_path / "out" / "grid.html"
    done = run_cli("compare", f"{MODELS}:tiny_mlp", "--targets", "corstone-300,ethos-u65-256",
                   "--memory", "dedicated-sram", "--html", page, "--json",
                   tmp_path / "rows.json", "-j", "1", "-q")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "corstone-300" in line
             or "ethos-u65-256" in line]
    # the U55 cannot place a program in dedicated SRAM: a row with the compile's own error
    assert any("error: ConfigError: target corstone-300 cannot place the program in "
               "'dedicated-sram'" in line for line in lines), done.stdout
    u65 = json.loads((tmp_path / "rows.json").read_text())["rows"][1]
    assert u65["target"] == "ethos-u65-256" and u65["error"] == "" and \
        u65["memory_placement"] == "dedicated-sram" and u65["top1_agreement"] is not None
    html = page.read_text()
    assert "<svg" in html and "ethos-u65-256" in html and f"wrote {page}" in done.stdout


def test_commands_refuse_bad_input_in_one_line_and_write_nothing(tmp_path):
    page = tmp_path / "grid.html"
    cases = {
        ("compare", f"{MODELS}:tiny_mlp", "--targets", "corstone-300,nope"):
            "unknown target 'nope'",
        ("compare", f"{MODELS}:nothing", "--targets", "corstone-300"):
            "has no function 'nothing'",
        ("compare", f"{MODELS}:tiny_mlp", "--targets", "corstone-300", "-j", "0"):
            "-j/--workers must be at least 1",
        ("compare", f"{MODELS}:tiny_mlp", "--targets", "corstone-300", "--timeout", "0"):
            "timeout is the seconds a cell may compile",
    }
    bad = {
        "unknown.toml": (f'models = ["{MODELS}:tiny_mlp"]\ntargets = ["corstone-300"]\n'
                         'colour = "blue"\n', "unknown key(s) colour"),
        "target.toml": (f'models = ["{MODELS}:tiny_mlp"]\ntargets = ["corstone-3000"]\n',
                        "unknown target 'corstone-3000'"),
        "precision.json": (json.dumps({"models": [f"{MODELS}:tiny_mlp"],
                                       "targets": ["corstone-300"], "precisions": ["int4"]}),
                           "unknown precision 'int4'"),
        "memory.toml": (f'models = ["{MODELS}:tiny_mlp"]\ntargets = ["corstone-300"]\n'
                        'memory = ["ssd"]\n', "unknown memory placement 'ssd'"),
        "broken.toml": ('models = ["a.py:f"\n', "cannot read sweep config"),
        "nomodels.toml": ('targets = ["corstone-300"]\n', "'models' is missing"),
        # a model file is found beside the config, not in the working directory
        "relative.toml": ('models = ["grid_models.py:f"]\ntargets = ["corstone-300"]\n',
                          f"model file '{tmp_path / 'grid_models.py'}' not found"),
    }
    for name, (text, _) in bad.items():
        (tmp_path / name).write_text(text)
    cases.update({("sweep", str(tmp_path / name)): message
                  for name, (_, message) in bad.items()})
    cases[("sweep", str(tmp_path / "absent.toml"))] = "not found"
    for args, message in cases.items():
        done = run_cli(*args, "--html", page)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and message in done.stderr, (args, done.stderr)
        assert done.stderr.startswith("mcu-npu: error: ")
        assert not page.exists() and not list(tmp_path.glob(".grid.html*"))


@pytest.mark.slow
def test_sweep_command_runs_a_config_relative_to_its_folder(tmp_path):
    (tmp_path / "grid_models.py").write_text((HERE / "grid_models.py").read_text())
    config = tmp_path / "sweep.toml"
    config.write_text('targets = ["ethos-u85-256"]\nprecisions = ["int8", "int16"]\n'
                      '[models]\nmlp = "grid_models.py:tiny_mlp"\n'
                      'fails = "grid_models.py:broken"\n')
    rows_file = tmp_path / "rows.json"
    done = run_cli("sweep", config, "--json", rows_file, "-j", "1")
    assert done.returncode == 0, done.stderr
    progress = [line for line in done.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 4, done.stderr  # a line per finished cell
    rows = json.loads(rows_file.read_text())["rows"]
    assert [(r["model"], r["precision"]) for r in rows] == [
        ("mlp", "int8"), ("mlp", "int16"), ("fails", "int8"), ("fails", "int16")]
    int8, int16 = rows[:2]
    assert int16["int16_ops"] == int16["ops_total"] and int8["int16_ops"] is None
    assert int16["sqnr_db"] > int8["sqnr_db"] + 3  # 16-bit activations: ~6 dB per bit
    assert all(r["error"].endswith("this factory cannot build its model") for r in rows[2:])
    assert "Pareto front" in done.stdout and "* mlp" in done.stdout


def test_the_example_sweep_config_names_what_exists():
    from mcu_npu.grid.config import read_config
    from mcu_npu.model_source import check_source

    examples = HERE.parent / "examples"
    config = read_config(examples / "sweep.toml")
    assert config.models == {"digits": f"{examples / 'digits.py'}:calibrated",
                             "kws": f"{examples / 'kws_cnn.py'}:factory",
                             "resnet8": "mcu_npu.models.mlperf_tiny:resnet8"}
    assert config.targets == ["imxrt700", "corstone-300", "corstone-320"]
    assert config.precisions == ["int8", "int16"] and config.memory == ["auto"]
    for spec in config.models.values():
        check_source(spec)  # raises when a file or factory is missing


def test_models_with_one_factory_name_are_told_apart(tmp_path):
    from mcu_npu.grid.config import read_config
    from mcu_npu.model_source import model_names

    assert model_names(["a/kws.py:factory", "b/digits.py:factory", "mcu_npu.models:resnet8",
                        "x.py:resnet8", "c/kws.py:factory"]) == [
        "a/kws.py:factory", "digits:factory", "mcu_npu.models:resnet8", "x:resnet8",
        "c/kws.py:factory"]
    for name in ("kws.py", "digits.py"):
        (tmp_path / name).write_text("def factory():\n    pass\n")
    config = tmp_path / "sweep.json"
    config.write_text(json.dumps({"models": ["kws.py:factory", "digits.py:factory"],
                                  "targets": ["corstone-300"]}))
    assert read_config(config).models == {"kws:factory": f"{tmp_path / 'kws.py'}:factory",
                                          "digits:factory": f"{tmp_path / 'digits.py'}:factory"}


def _threads() -> tuple[int, str]:
    return torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS", "")


def test_pool_workers_share_the_cores():
    """Each worker of a pool of two runs torch (and OpenMP) on half the cores, as a Ray task
    runs on one: two workers each spreading over every core slow each other down."""
    from mcu_npu.grid import executors

    share = max(1, executors._cores() // 2)
    with executors._pool(2) as pool:
        assert pool.submit(_threads).result() == (share, str(share))


# -- a plain script (no `if __name__ == "__main__":`) --------------------------------------
def _run_script(tmp_path, text: str):
    import subprocess

    script = tmp_path / "plain.py"
    script.write_text(text)
    src = str(Path(mcu_npu.__file__).resolve().parents[1])
    paths = [src, os.environ.get("PYTHONPATH")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}
    return subprocess.run([sys.executable, "-W", "ignore", str(script)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=600)


@pytest.mark.xdist_group("grid")
def test_a_plain_script_compares_in_worker_processes(tmp_path):
    """The workers do not run the script again: each row compiled, the script's top level
    ran once (before, each worker ran it, started the grid again and died: every row said
    "the worker process died compiling this cell")."""
    out = _run_script(tmp_path, f"""
import mcu_npu
print("top level", flush=True)
grid = mcu_npu.compare({MODELS + ':tiny_mlp'!r}, targets=["corstone-300", "ethos-u85-256"],
                       workers=2)
for row in grid.rows:
    print("row", row.target, row.ok, row.error, row.ops_on_npu, flush=True)
""")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines.count("top level") == 1, out.stdout
    assert [line for line in lines if line.startswith("row")] == \
        ["row corstone-300 True  3", "row ethos-u85-256 True  3"], out.stdout


def test_a_plain_script_whose_factory_is_its_own_is_told_what_to_change(tmp_path):
    """A factory defined in the script needs workers that run the script; it starting the
    grid at its top level is refused before any worker starts, naming the line."""
    out = _run_script(tmp_path, """
import mcu_npu


def factory():
    raise AssertionError("no worker may start")


grid = mcu_npu.compare(factory, targets=["corstone-300"], workers=2)
""")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "mcu_npu.errors.ConfigError: factory is defined in the script being run, which each "
        "worker process runs again to find it; the script starts this grid at its top level "
        f"({tmp_path / 'plain.py'}:9), so each worker would start it again: put that call "
        "under `if __name__ == \"__main__\":`, or move factory into a file of its own and "
        "name the model as \"that_file.py:factory\"")


def test_a_plain_script_named_as_its_own_factory_file_is_told_what_to_change(tmp_path):
    out = _run_script(tmp_path, """
import mcu_npu


def factory():
    raise AssertionError("no worker may start")


grid = mcu_npu.compare("plain.py:factory", targets=["corstone-300"], workers=2)
""")
    assert out.returncode == 1
    assert "ConfigError: factory is defined in the script being run" in out.stderr
    assert f"at its top level ({tmp_path / 'plain.py'}:9)" in out.stderr


@pytest.mark.xdist_group("grid")
def test_a_factory_file_that_starts_a_grid_is_its_rows_error_not_a_pool_in_a_pool(tmp_path):
    """The factory's file starts a grid when a worker imports it: the worker refuses it (a
    grid in each worker, each with its own workers, would never end)."""
    (tmp_path / "starts_a_grid.py").write_text(f"""
import mcu_npu
mcu_npu.compare({MODELS + ':tiny_mlp'!r}, targets=["corstone-300"], workers=1)


def factory():
    raise AssertionError("not reached")
""")
    grid = compare(str(tmp_path / "starts_a_grid.py") + ":factory", targets=["corstone-300"],
                   workers=1, progress=False)
    assert grid.rows[0].error == (
        f"ConfigError: importing '{tmp_path / 'starts_a_grid.py'}' failed: a grid was started "
        "inside a worker of another grid: the model factory's file starts one when imported; "
        "put that call under `if __name__ == \"__main__\":`")
