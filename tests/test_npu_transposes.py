"""Layout changes at a partition's boundary run on the NPU where its compiler takes them.

The Ethos-U runtime only copies, so its graphs always transpose on the NPU. The Neutron
runtime transposes NCHW <-> NHWC on the CPU when a tensor's format flag is set; where the
Neutron converter takes the TRANSPOSE (``NeutronLimits.takes_transpose``, NXP's rule), the
tensor is handed over as it lies (flag 0) and the graph transposes it on the NPU instead.
Where it does not (a 3-channel image), the runtime still transposes on the CPU.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import mcu_npu
from device_checks import assert_neutron_io_matches, delegate_io
from helpers import sqnr_holds
from mcu_npu.npu.neutron import payload as nxp
from mcu_npu.estimate.metrics import sqnr_db
from mcu_npu.targets import NeutronLimits
from mcu_npu.tflite.describe import op_names


@pytest.mark.parametrize("shape, perm, takes", [
    ((1, 8, 16, 16), (0, 2, 3, 1), True),     # NCHW -> NHWC: W, C, H*W multiples of 8
    ((1, 3, 96, 96), (0, 2, 3, 1), False),    # a camera's 3 channels
    ((1, 8, 16, 12), (0, 2, 3, 1), False),    # W = 12
    ((2, 8, 16, 16), (0, 2, 3, 1), False),    # batch 2
    ((1, 1, 49, 10), (0, 2, 3, 1), True),     # one channel: no data moves
    ((1, 8, 8, 16), (0, 3, 1, 2), True),      # NHWC -> NCHW: C, H*W multiples of 8
    ((1, 3, 3, 16), (0, 3, 1, 2), False),     # H*W = 9
    ((1, 8, 8, 12), (0, 3, 1, 2), False),     # C = 12
    ((1, 8, 8, 16), (0, 2, 1, 3), False),     # another permutation
])
def test_neutron_takes_the_transposes_nxp_lists(shape, perm, takes):
    assert NeutronLimits().takes_transpose(shape, perm) is takes


class Features(nn.Module):
    """Two convolutions from an NCHW input to an NCHW output."""

    def __init__(self, channels: int):
        super().__init__()
        self.c1 = nn.Conv2d(channels, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 16, 3, stride=2, padding=1)

    def forward(self, x):
        return self.c2(torch.relu(self.c1(x)))


def _compile(channels: int):
    torch.manual_seed(0)
    model = Features(channels).eval()
    g = torch.Generator().manual_seed(1)
    samples = [(torch.randn(1, channels, 16, 16, generator=g),) for _ in range(16)]
    prog = mcu_npu.compile(model, samples[0], target="imxrt700", calibration=samples[:8],
                           npu_compiler="reference", progress=False)
    return model, prog, samples[8:]


def _graph_ops(prog) -> list[str]:
    from mcu_npu.device.payload import unpack_reference

    (processed, *_), = delegate_io(prog.buffer, prog.host_data)
    return op_names(unpack_reference(processed)[0].buffer), processed


def _holds_the_contract(model, prog, held_out):
    with torch.no_grad():
        want = torch.cat([model(*x) for x in held_out])
        ref = torch.cat([prog.reference(*x)[0] for x in held_out])
    got = torch.cat([prog.run(*x)[0] for x in held_out])  # conftest: == ExecuTorch's run
    host, reference = sqnr_db(want, got), sqnr_db(want, ref)
    assert reference > 25, reference
    assert sqnr_holds(host, reference), (host, reference)


@pytest.mark.slow
def test_neutron_transposes_the_boundary_on_the_npu_where_it_can():
    model, prog, held_out = _compile(8)
    ops, processed = _graph_ops(prog)
    assert ops[0] == "TRANSPOSE" and ops[-1] == "TRANSPOSE", ops
    from mcu_npu.device.payload import unpack_reference

    formats = unpack_reference(processed)[1]["neutron_formats"]
    assert (list(formats["inputs"]), list(formats["outputs"])) == ([0], [0])
    assert_neutron_io_matches(prog.buffer, prog.host_data)
    rows = prog.report.latency["rows"]
    assert not [r for r in rows if r["kind"] == "transpose"], rows
    npu = next(r for r in rows if r["runs_on"] == "npu")
    # the transposes' traffic is in the NPU bound: (8*16*16 + 16*8*8) bytes, read and written
    assert f"{2 * (8 * 16 * 16 + 16 * 8 * 8):,} of them transposed" in npu["basis"], npu
    _holds_the_contract(model, prog, held_out)


@pytest.mark.slow
def test_a_transpose_neutron_cannot_take_stays_with_the_runtime():
    """A 3-channel input: the runtime transposes it on the CPU (flag set); the output, whose
    16 channels Neutron can transpose, is transposed on the NPU."""
    model, prog, held_out = _compile(3)
    ops, processed = _graph_ops(prog)
    assert ops[0] != "TRANSPOSE" and ops[-1] == "TRANSPOSE", ops
    rows = prog.report.latency["rows"]
    moved = [r for r in rows if r["kind"] == "transpose"]
    assert [r["node"] for r in moved] == ["npu partition 0 input 0"], moved
    assert_neutron_io_matches(prog.buffer, prog.host_data)
    _holds_the_contract(model, prog, held_out)
