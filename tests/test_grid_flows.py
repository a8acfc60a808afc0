"""The grid's flow axis (``mcu_npu.grid``): one cell per model, target and compile flow,
``mcu_npu.compile`` beside another flow named by its function; each row names its flow,
carries the figures that flow and the ``extras`` function gave (extra table columns, kept in
the JSON), and a flow that raises, or exits, is that row's error.

The flows are ``tests/grid_flows.py``'s, the model ``tests/grid_models.py``'s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcu_npu.errors import ConfigError
from mcu_npu.grid import Row, sweep
from mcu_npu.grid.run import Grid, grid_from_json
from mcu_npu.grid.table import format_table

from grid_flows import tiny_flow
from grid_models import tiny_cnn

HERE = Path(__file__).resolve().parent
MODELS = str(HERE / "grid_models.py")
FLOWS = str(HERE / "grid_flows.py")


def test_each_flow_is_a_row_with_its_figures_and_a_failing_flow_is_its_error():
    flows = {"ours": None, "tiny": f"{FLOWS}:tiny_flow", "failing": f"{FLOWS}:failing_flow",
             "exiting": f"{FLOWS}:exiting_flow"}
    grid = sweep([f"{MODELS}:tiny_cnn"], ["corstone-300"], workers=2, progress=False,
                 flows=flows, extras=f"{FLOWS}:pte_figures")
    ours, tiny, failing, exiting = grid.rows
    assert [(r.model, r.target, r.flow) for r in grid.rows] == [
        ("tiny_cnn", "corstone-300", f) for f in flows]
    # mcu_npu.compile's row: its own figures, and the extras read from its .pte
    assert ours.ok and ours.ops_on_npu > 0 and ours.sqnr_db is not None
    assert ours.extra == {"pte B": ours.pte_bytes, "identifier": "ET12"}
    # the other flow's row: the bytes it returned, its figures, its extra and the extras'
    model, example, calibration = tiny_cnn()
    pte = tiny_flow(model, example, calibration, "corstone-300", {})["pte"]
    assert tiny.ok and tiny.pte_bytes == len(pte) == len(b"\0\0\0\0TINYcorstone-300 8 []")
    assert (tiny.ops_on_npu, tiny.ops_total, tiny.sqnr_db, tiny.latency_us) == (1, 2, None, None)
    assert tiny.extra == {"calibration": 8, "pte B": len(pte), "identifier": "TINY"}
    assert failing.error == "RuntimeError: this flow cannot compile the model"
    assert failing.flow == "failing" and failing.extra == {}
    assert exiting.error == "SystemExit: vela: error: unrecognized arguments"
    # the table: a flow column, the extra figures as columns (in the order they first
    # come); the JSON keeps them
    text = str(grid)
    lines = {w[w.index("corstone-300") + 1]: line for line in text.splitlines()
             if "corstone-300" in (w := line.split())}
    head = next(line for line in text.splitlines() if line.split()[:2] == ["target", "flow"])
    assert head.split()[-4:] == ["pte", "B", "identifier", "calibration"]
    assert lines["ours"].split()[-3:] == [f"{ours.pte_bytes:,}", "ET12", "-"]
    assert lines["tiny"].split()[-3:] == [f"{len(pte):,}", "TINY", "8"]
    assert "error: RuntimeError: this flow cannot compile the model" in text
    assert "x 4 flows" in grid.title
    back = grid_from_json(grid.to_json())
    assert back.rows == grid.rows
    assert json.loads(grid.to_json())["rows"][1]["extra"] == tiny.extra


def _row(flow: str, **extra) -> Row:
    return Row(model="m", target="t", precision="int8", memory="auto", flow=flow,
               fits=True, latency_us=10.0, ops_on_npu=1, ops_total=1, partitions=1,
               extra=extra)


def test_the_flow_column_shows_only_with_several_flows_and_extras_align():
    alone = format_table([_row("mcu-npu")])
    assert "flow" not in alone and "mcu-npu" not in alone
    other = format_table([_row("upstream-arm")])
    assert other.splitlines()[0].endswith("flow upstream-arm")
    rows = [_row("mcu-npu", payload=12345), _row("up", payload=7, kind="x")]
    head, a, b = format_table(rows).splitlines()[-3:]
    assert head.split()[:2] == ["target", "flow"] and head.split()[-2:] == ["payload", "kind"]
    assert a.split()[:2] == ["t", "mcu-npu"] and b.split()[:2] == ["t", "up"]
    end = head.index("payload") + len("payload")  # numbers are right-aligned
    assert a[end - len("12,345"):end] == "12,345" and b[end - 1:end] == "7"
    assert a.split()[-1] == "-" and b.split()[-1] == "x"
    assert grid_from_json(Grid(rows).to_json()).rows == rows


def test_a_flow_that_is_not_there_is_refused_before_any_compile():
    with pytest.raises(ConfigError, match="has no function 'nothing'"):
        sweep([f"{MODELS}:tiny_cnn"], ["corstone-300"], flows=[f"{FLOWS}:nothing"])
    with pytest.raises(ConfigError, match="at least one flow"):
        sweep([f"{MODELS}:tiny_cnn"], ["corstone-300"], flows=[])
