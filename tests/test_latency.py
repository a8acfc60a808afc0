"""The whole-model latency estimate (``mcu_npu.estimate.latency``): NPU rows from Vela's total
cycles or the Neutron bound, CPU rows from the Cortex-M cycle model, the runtime's transposes
and copies around delegate calls, and the model against published MLPerf Tiny latencies."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

import mcu_npu
from mcu_npu.estimate.cpu_cycles import CORES
from mcu_npu.estimate.published import FIGURES, REFERENCE, TOLERANCE


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, 4)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x)) + x
        return self.fc(x.flatten(1))


def _compile(target, excluded=()):
    torch.manual_seed(0)
    x = (torch.randn(1, 3, 8, 8),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mcu_npu.compile(ConvNet().eval(), x, target=target, calibration=[x],
                               operators_not_to_delegate=list(excluded))


@pytest.fixture(scope="module")
def vela_program():
    return _compile("corstone-300")


@pytest.fixture(scope="module")
def mixed_neutron():
    return _compile("imxrt700", excluded=["aten_convolution_default_1"])  # conv2


def _rows(prog, runs_on=None):
    return [r for r in prog.report.latency["rows"] if runs_on is None or r["runs_on"] == runs_on]


def _assert_rows_sum(lat):
    assert math.isclose(sum(r["us"] for r in lat["rows"]), lat["latency_us"], abs_tol=1e-2)
    assert math.isclose(lat["npu_us"] + lat["cpu_us"], lat["latency_us"], abs_tol=2e-3)


def test_vela_partition_row_is_total_cycles_at_its_clock(vela_program):
    lat = vela_program.report.latency
    npu_rows = _rows(vela_program, "npu")
    parts = vela_program.report.partitions
    assert len(npu_rows) == len(parts) >= 1
    for row, part in zip(npu_rows, parts):
        stats = part.stats
        assert row["cycles"] == stats["total_cycles"]
        assert row["us"] == pytest.approx(stats["total_cycles"] / stats["clock_hz"] * 1e6,
                                          abs=1e-3)
        assert row["kind"] == "npu" and "Vela's total cycles" in row["basis"]
    assert lat["npu_us"] == pytest.approx(sum(r["us"] for r in npu_rows), abs=1e-3)
    _assert_rows_sum(lat)


def test_all_npu_program_charges_only_the_runtime_copies_to_the_cpu(vela_program):
    """Everything is on the NPU; the CPU does the delegate's I/O memcpy (EthosUBackend),
    and quantize / dequantize of the float program I/O."""
    report = vela_program.report
    assert all(o.kernel == "npu" for o in report.ops)
    cpu = _rows(vela_program, "cortex-m")
    assert {r["kind"] for r in cpu} <= {"copy", "quantize", "dequantize"}
    assert any(r["op"] == "EthosUBackend memcpy" for r in cpu)
    assert report.summary["npu_us"] == report.latency["npu_us"]
    assert report.summary["latency_us"] == report.latency["latency_us"]


def test_mixed_program_has_cortex_m_rows_and_a_neutron_bound(mixed_neutron):
    lat = mixed_neutron.report.latency
    cpu_ops = [o for o in mixed_neutron.report.ops if o.kernel == "cortex-m"]
    assert cpu_ops, "conv2 should run on the Cortex-M"
    kinds = {r["kind"] for r in _rows(mixed_neutron, "cortex-m")}
    assert "conv" in kinds
    conv = next(r for r in _rows(mixed_neutron, "cortex-m") if r["kind"] == "conv")
    assert conv["work"] == 8 * 8 * 8 * 8 * 9  # output elements * in_channels * 3 * 3
    m33 = CORES["cortex-m33"]
    assert conv["basis"] == f"conv {m33.per_mac['conv']:g} cyc/MAC (fitted)"
    assert conv["cycles"] == round(m33.per_call + m33.per_mac["conv"] * conv["work"])
    # the Neutron runtime transposes the flagged NCHW delegate I/O on the CPU
    assert any(r["op"] == "NeutronBackend NCHW<->NHWC transpose" and r["kind"] == "transpose"
               for r in _rows(mixed_neutron, "cortex-m"))
    npu = _rows(mixed_neutron, "npu")
    assert npu and all(r["basis"].startswith("bound") for r in npu)
    assert lat["npu_is_bound"] is True
    assert lat["cpu_clock_hz"] == 325_000_000 and lat["cpu_core"] == "cortex-m33"
    _assert_rows_sum(lat)


def test_neutron_bound_is_the_larger_of_compute_and_memory(mixed_neutron):
    """64 MACs per cycle at 325 MHz or the bytes moved at the stated bandwidth, whichever
    takes longer."""
    report = mixed_neutron.report
    for k, row in enumerate(_rows(mixed_neutron, "npu")):
        macs = sum(o.macs for o in report.ops if o.placement == f"NPU partition {k}")
        assert row["us"] >= macs / 64 / 325e6 * 1e6 - 1e-3
        assert f"{macs:,} MACs / 64 per cycle" in row["basis"]


def test_latency_survives_save_and_load(vela_program, tmp_path):
    path = tmp_path / "p.pte"
    vela_program.save(str(path))
    loaded = mcu_npu.load(str(path)).report
    assert loaded.latency["latency_us"] == vela_program.report.latency["latency_us"]
    assert loaded.summary["cpu_us"] == vela_program.report.latency["cpu_us"]


def test_every_reference_figure_has_a_core_model():
    for core, figures in REFERENCE.items():
        assert core in CORES
        assert all(f in FIGURES and f.core == core for f in figures)
        assert {f.model for f in figures} == {"ds_cnn", "mobilenet_v1_025", "resnet8",
                                              "fc_autoencoder"}


def _all_cpu_estimate_error(model: str, target: str) -> tuple[float, float, float]:
    from mcu_npu.models import mlperf_tiny
    from mcu_npu.targets import get_target

    tgt = get_target(target)
    figure = next(f for f in REFERENCE[tgt.cpu.core] if f.model == model)
    net, example = getattr(mlperf_tiny, model)()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = mcu_npu.compile(net, example, target=target, calibration=[example],
                               operators_not_to_delegate=["*"])
    lat = prog.report.latency
    assert lat["npu_us"] == 0 and not _rows(prog, "npu")
    published = figure.at_clock_us(tgt.cpu.clock_hz)
    return lat["latency_us"], published, lat["latency_us"] / published - 1


@pytest.mark.slow
@pytest.mark.parametrize("model,target", [
    # the acceptance figure: DS-CNN all on imxrt700's Cortex-M33 against the STM32U575's
    # (Cortex-M33 @ 160 MHz) MLPerf Tiny v1.3 KWS median, scaled to 325 MHz: 14,274 us
    ("ds_cnn", "imxrt700"),
    ("resnet8", "imxrt700"),
    ("fc_autoencoder", "imxrt700"),
    # Cortex-M85 against the EK-RA8D1's medians, scaled from 480 MHz to 1 GHz
    ("ds_cnn", "corstone-320"),
    ("fc_autoencoder", "corstone-320"),
])
def test_cpu_model_reproduces_published_mlperf_tiny_latency(model, target):
    """Within ``TOLERANCE`` (30%) of the reference figure scaled linearly to the target's CPU
    clock (the other models and targets: benchmarks/latency.py)."""
    estimate, published, error = _all_cpu_estimate_error(model, target)
    assert abs(error) <= TOLERANCE, (model, target, estimate, published, error)


def test_portable_float_ops_cost_scalar_cycles():
    """Ops left as portable float kernels: a conv at the scalar float MAC cost, an
    elementwise op per element, a permute per byte; views cost nothing."""
    from executorch.exir import to_edge

    from mcu_npu.estimate.cpu_cycles import op_work, work_cycles

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            return torch.sigmoid(self.conv(x)).permute(0, 2, 3, 1).reshape(1, -1)

    ep = to_edge(torch.export.export(Net().eval(), (torch.randn(1, 3, 6, 6),))) \
        .exported_program()
    works = {n.name: op_work(n) for n in ep.graph.nodes if n.op == "call_function"}
    conv = next(w for k, w in works.items() if "convolution" in k)
    assert (conv.kind, conv.runs_on, conv.unit, conv.float_data) == \
        ("conv", "portable", "MACs", True)
    assert conv.amount == 4 * 4 * 4 * 3 * 3 * 3
    m33 = CORES["cortex-m33"]
    cycles, basis = work_cycles(conv, m33)
    assert cycles == m33.per_call + m33.per_mac["float_mac"] * conv.amount
    assert basis.startswith("float_mac") and basis.endswith("(assumed)")
    sigmoid = next(w for k, w in works.items() if "sigmoid" in k)
    assert (sigmoid.kind, sigmoid.amount) == ("elementwise", 64)
    permute = next(w for k, w in works.items() if "permute" in k)
    assert (permute.kind, permute.unit, permute.amount) == ("transpose", "bytes", 64 * 4)
    assert all(w is None for k, w in works.items() if "view" in k)


def test_quantize_cost_is_within_the_stated_factor_of_the_published_kernel_cycles():
    """Each published per-kernel figure (``KERNEL_FIGURES``) against the model's cost of the
    same call on the same core: within ``KERNEL_FACTOR`` either way, labelled published."""
    from mcu_npu.estimate.cpu_cycles import Work, work_cycles
    from mcu_npu.estimate.published import KERNEL_FACTOR, KERNEL_FIGURES

    assert KERNEL_FIGURES
    for figure in KERNEL_FIGURES:
        core = CORES[figure.core]
        cycles, basis = work_cycles(Work(figure.kernel, "cortex-m", "elements",
                                         figure.elements), core)
        ratio = cycles / figure.cycles
        assert 1 / KERNEL_FACTOR <= ratio <= KERNEL_FACTOR, (figure, cycles, ratio)
        assert basis.endswith("(published)"), basis
