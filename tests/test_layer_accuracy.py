"""Per-layer error (``CompiledProgram.accuracy``): one row per compute op, the op where
accuracy is lost first."""

import copy
import math
import warnings

import pytest
import torch
from torch import nn

import mcu_npu
from mcu_npu.flow import memory as api
from mcu_npu.models.mlperf_tiny import mobilenet_v1_025
from mcu_npu.estimate.layers import SOURCE_NPU, SOURCE_OUTPUT, SOURCE_REFERENCE
from mcu_npu.report.text import layer_lines
from mcu_npu.runtime.npu_emulator import recording_tensors
from mcu_npu.tflite.ops_aliases import QUANTIZE, aten

ROW_KEYS = {"node", "op", "runs_on", "source", "measured_at", "sqnr_db", "reference_sqnr_db",
            "gap_db", "max_error_steps", "loss_db"}


def _samples(shape, n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(shape, generator=g),) for _ in range(n)]


def _nth(prog, op: str, k: int) -> str:
    """The report's name of the ``k``-th compute op ``op``."""
    return [o.node for o in prog.report.ops if o.op == op][k]


def _check_rows(prog, rows):
    assert sorted(r["node"] for r in rows) == sorted(o.node for o in prog.report.ops)
    for r in rows:
        assert set(r) == ROW_KEYS
        assert math.isfinite(r["sqnr_db"]) and math.isfinite(r["reference_sqnr_db"])
    losses = [r["loss_db"] for r in rows if r["loss_db"] is not None]
    assert losses == sorted(losses, reverse=True)


# -- MobileNetV1-0.25 on every target ---------------------------------------------------------
@pytest.fixture(scope="module")
def mobilenet():
    """(target -> compiled MobileNetV1-0.25, its samples), compiled once per target."""
    model, example = mobilenet_v1_025()
    samples = _samples(example[0].shape, 2)
    programs = {}

    def compiled(target):
        if target not in programs:
            with warnings.catch_warnings():  # imxrt700: a host-only program, as meant
                warnings.simplefilter("ignore", UserWarning)
                programs[target] = mcu_npu.compile(model, example, target=target,
                                                   calibration=samples)
        return programs[target]

    return compiled, samples


@pytest.mark.slow
@pytest.mark.parametrize("target", ["imxrt700", "corstone-300", "corstone-320"])
def test_mobilenet_table_lists_every_compute_op(mobilenet, target):
    compiled, samples = mobilenet
    prog = compiled(target)
    rows = prog.accuracy(samples)
    _check_rows(prog, rows)
    npu = [r for r in rows if r["runs_on"].startswith("NPU")]
    assert npu and all(r["source"] == SOURCE_NPU for r in npu)
    # a convolution fused with its ReLU is measured at the ReLU's output
    conv, relu = _nth(prog, "aten.convolution", 0), _nth(prog, "aten.relu", 0)
    assert next(r for r in rows if r["node"] == conv)["measured_at"] == relu
    lines = layer_lines(rows)
    assert len(lines) == len(rows) + 1 and lines[1].startswith(rows[0]["node"] + " ")


@pytest.mark.slow
def test_float_side_error_points_at_its_layer(mobilenet):
    """The float model's 9th convolution scaled by 4 after compiling: quantized and float
    part ways at that layer, so it heads the table."""
    compiled, samples = mobilenet
    prog = compiled("corstone-300")
    broken = copy.copy(prog)
    broken.float_model = copy.deepcopy(prog.float_model)
    convs = [m for m in broken.float_model.modules() if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        convs[8].weight.mul_(4.0)
    rows = broken.accuracy(samples)
    assert rows[0]["node"] == _nth(prog, "aten.convolution", 8)
    assert rows[0]["loss_db"] > 6


# -- an error injected into the program -------------------------------------------------------
class _Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(c, 8, 3, padding=1) for c in (3, 8, 8, 8))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        for conv in self.convs:
            x = torch.relu(conv(x))
        return self.fc(torch.flatten(self.pool(x), 1))


BROKEN = 2  # the third convolution


def _coarser_after(conv_index: int, factor: float):
    """A stand-in for ``api.lower`` that multiplies the scale of the quantize after the
    ``conv_index``-th convolution (through its fused ReLU) in the Edge program before
    lowering: a corrupted scale in the program, not in the reference."""
    real = api.lower

    def lower(edge, plan, target=None):
        graph = edge.exported_program().graph
        node = [n for n in graph.nodes if n.target == aten.convolution.default][conv_index]
        while len(node.users) == 1 and not any(map(_is_quantize, node.users)):
            (node,) = node.users
        for q in filter(_is_quantize, list(node.users)):
            if not q.meta.get("corrupted"):
                q.args = (q.args[0], q.args[1] * factor, *q.args[2:])
                q.meta["corrupted"] = True
        return real(edge, plan, target)

    return lower


def _is_quantize(node) -> bool:
    return node.target in QUANTIZE


@pytest.fixture(scope="module")
def broken_program():
    torch.manual_seed(0)
    model = _Stack().eval()
    example = (torch.randn(1, 3, 16, 16),)
    samples = _samples(example[0].shape, 2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(api, "lower", _coarser_after(BROKEN, 16.0))
        prog = mcu_npu.compile(model, example, target="corstone-300", calibration=samples,
                               operators_not_to_delegate=["aten.mean.dim", "aten.linear"])
    return prog, samples


def test_corrupted_scale_heads_the_table(broken_program):
    prog, samples = broken_program
    rows = prog.accuracy(samples)
    _check_rows(prog, rows)
    top = rows[0]
    assert (top["node"], top["source"]) == (_nth(prog, "aten.convolution", BROKEN), SOURCE_NPU)
    assert top["gap_db"] > 10  # the host departs from the reference there
    assert top["max_error_steps"] >= 4
    others = [r for r in rows[1:] if r["loss_db"] is not None]
    assert all(r["loss_db"] < top["loss_db"] - 6 for r in others)


def test_cpu_op_rows_say_where_their_values_come_from(broken_program):
    """The mean and the linear layer run on the CPU. The linear layer computes the program's
    output, so its host value is that output and its SQNR the whole program's; the mean's
    host value is tied to no node, so its row shows the reference and says so."""
    prog, samples = broken_program
    rows = {r["node"]: r for r in prog.accuracy(samples)}
    cpu = {o.op: rows[o.node] for o in prog.report.ops if o.kernel != "npu"}
    assert {"aten.mean.dim", "aten.linear"} <= set(cpu)
    assert cpu["aten.linear"]["source"] == SOURCE_OUTPUT
    assert cpu["aten.linear"]["sqnr_db"] == pytest.approx(prog.report.accuracy["sqnr_db"],
                                                          abs=0.05)
    mean = cpu["aten.mean.dim"]
    assert mean["source"] == SOURCE_REFERENCE
    assert mean["gap_db"] is None and mean["max_error_steps"] is None
    assert mean["sqnr_db"] == mean["reference_sqnr_db"]


def test_recording_leaves_the_results_alone(broken_program):
    prog, samples = broken_program
    plain = prog.run(*samples[0])
    with recording_tensors() as calls:
        recorded = prog.run(*samples[0])
    assert calls and all(calls)
    assert all(torch.equal(a, b) for a, b in zip(plain, recorded))
    assert _nth(prog, "aten.relu", BROKEN) in calls[0]  # tensors named after Edge nodes


def test_a_conv1d_row_reads_its_nhwc_tensor_in_pytorch_layout():
    """The converter lays a 1-D convolution out as NHWC [N, 1, L, C]: its row compares that
    tensor with the reference's [N, C, L] (no gap), not a reshape of it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(6, 8, 3, padding=1), nn.ReLU()).eval()
    samples = _samples((1, 6, 20), 4)
    prog = mcu_npu.compile(model, samples[0], target="corstone-300", calibration=samples)
    (row,) = [r for r in prog.accuracy(samples[:2]) if r["op"] == "aten.convolution"]
    assert row["source"] == SOURCE_NPU
    assert abs(row["gap_db"]) < 0.5 and row["max_error_steps"] <= 1, row


def test_the_float_graph_is_kept_for_the_same_model_target_sample_and_weights():
    """``flow.measure._float_graph`` is made once per float model, target, sample and
    parameter state: the precision search measures several programs of one model."""
    from mcu_npu.flow.measure import _float_graph
    from mcu_npu.quantization.exact import run_graph_exact
    from mcu_npu.targets import get_target

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).eval()
    x = torch.randn(1, 6)
    target = get_target("imxrt700")
    first = _float_graph(model, target, (x,))
    assert _float_graph(model, target, (x.clone(),)) is first
    assert _float_graph(model, get_target("corstone-300"), (x,)) is not first
    other = _float_graph(model, target, (x + 1,))
    assert other is not first and _float_graph(model, target, (x + 1,)) is other
    with torch.no_grad():
        model[0].weight.mul_(2.0)  # in place: the graph is made again, with the new weights
        changed = _float_graph(model, target, (x + 1,))
        assert changed is not other
        got = run_graph_exact(changed, x)[0].float()
        assert torch.allclose(got, model(x), rtol=1e-5, atol=1e-6)
