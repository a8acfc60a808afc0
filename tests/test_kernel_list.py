"""The kernel list the firmware must link, ExecuTorch's selected-ops YAML, and the versions on
record (issue 17, items 2 and 3)."""

from __future__ import annotations

import contextlib
import inspect
import io
import warnings

import pytest
import torch
import yaml
from executorch.codegen.tools.gen_oplist import gen_oplist
from torch import nn

from helpers import assert_warned_at
import mcu_npu
from mcu_npu import cli
from mcu_npu.firmware import deployability, kernels_list
from mcu_npu.firmware.deployability import NotDeployableError
from mcu_npu.models import ds_cnn
from mcu_npu.targets import get_target


def compile_quietly(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # host-only: test_deployable covers it
        return mcu_npu.compile(*args, **kwargs)


def oracle_yaml(pte) -> str:
    out = pte.parent / f"{pte.stem}.oracle.yaml"
    with contextlib.redirect_stdout(io.StringIO()):
        gen_oplist(output_path=str(out), model_file_path=str(pte))
    return out.read_text()


def without_debug_info(text: str) -> dict:
    d = yaml.safe_load(text)
    for op in d["operators"].values():
        op.pop("debug_info")
    return d


@pytest.fixture(scope="module", params=["cortex-m", "default"])
def ds_cnn_prog(request, tmp_path_factory):
    model, x = ds_cnn()[:2]
    excluded = ["*"] if request.param == "cortex-m" else []
    prog = compile_quietly(model, x, "imxrt700", calibration=[x],
                           operators_not_to_delegate=excluded)
    pte = prog.save(tmp_path_factory.mktemp("ds_cnn") / f"{request.param}.pte")
    return request.param, prog, pte


@pytest.mark.slow
def test_ds_cnn_selected_ops_are_gen_oplists(ds_cnn_prog):
    placement, prog, pte = ds_cnn_prog
    expected = oracle_yaml(pte)
    written = prog.save_selected_ops(pte.parent / "selected.yaml", pte_path=pte)
    assert written.read_text() == expected
    from_buffer = prog.save_selected_ops(pte.parent / "from_buffer.yaml")
    assert without_debug_info(from_buffer.read_text()) == without_debug_info(expected)

    ops = yaml.safe_load(expected)["operators"]
    kernels = prog.report.kernels
    assert [k["op"] for k in kernels if k["library"] != "delegate"] == \
        list(dict.fromkeys(k["op"] for k in kernels if k["library"] != "delegate"))
    assert {k["op"] for k in kernels if k["library"] != "delegate"} == set(ops)
    for k in kernels:
        namespace = k["op"].split("::")[0]
        expected_library = {"cortex_m": "cortex-m", "quantized_decomposed": "quantized",
                            "aten": "portable", "dim_order_ops": "portable"}.get(namespace,
                                                                                 "delegate")
        assert k["library"] == expected_library and k["available"], k
    delegates = [k["op"] for k in kernels if k["library"] == "delegate"]
    if placement == "cortex-m":
        assert not delegates and "cortex_m::quantized_conv2d_nhwc.out" in ops
    else:
        assert delegates == ["NeutronBackend"]
    assert not prog.report.kernel_problems
    text = str(prog.report)
    assert "kernels the firmware must link" in text
    assert all(k["op"] in text for k in kernels)
    assert mcu_npu.load(pte).report.kernels == kernels  # read back from the file


def tiny():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU()).eval(), torch.randn(1, 1, 6, 6)


def test_missing_kernel_is_flagged_at_compile_time(monkeypatch):
    real = kernels_list.library_ops

    def without_depthwise_conv(library):
        return real(library) - {"cortex_m::quantized_depthwise_conv2d_nhwc.out"}

    monkeypatch.setattr(kernels_list, "library_ops", without_depthwise_conv)
    model, x = tiny()
    missing = "no kernel for cortex_m::quantized_depthwise_conv2d_nhwc.out"
    with pytest.warns(UserWarning, match=missing) as caught:
        line = inspect.currentframe().f_lineno + 1
        prog = mcu_npu.compile(model, x, "imxrt700", calibration=[x],
                               operators_not_to_delegate=["*"])
    # raised by the program check, after the flow: it names the compile call all the same
    assert_warned_at(caught, missing, __file__, line)
    (problem,) = prog.report.kernel_problems
    conv = next(o.node for o in prog.report.ops if o.op == "aten.convolution")
    assert problem == (f"node {conv} (cortex_m.quantized_depthwise_conv2d_nhwc): no kernel "
                       "for cortex_m::quantized_depthwise_conv2d_nhwc.out on imxrt700: the "
                       "ExecuTorch Cortex-M (CMSIS-NN) kernels have no "
                       "cortex_m::quantized_depthwise_conv2d_nhwc.out"), problem
    assert f"warning: {problem}" in str(prog.report)
    with pytest.raises(NotDeployableError, match="quantized_depthwise_conv2d_nhwc"):
        deployability.check(prog.report, get_target("imxrt700"), deployable=True)


def test_versions_on_record_and_cli_ops_yaml(tmp_path, capsys):
    from ethosu.vela import __version__ as vela_version

    (tmp_path / "models.py").write_text(
        "import torch, torch.nn as nn\n"
        "def small():\n"
        "    torch.manual_seed(0)\n"
        "    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU()).eval(), "
        "(torch.randn(1, 1, 6, 6),)\n")
    out, ops_yaml = tmp_path / "m.pte", tmp_path / "selected_ops.yaml"
    assert cli.main(["compile", f"{tmp_path / 'models.py'}:small", "--target", "corstone-300",
                     "-o", str(out), "--ops-yaml", str(ops_yaml)]) == 0
    capsys.readouterr()
    assert ops_yaml.read_text() == oracle_yaml(out)

    report = mcu_npu.load(out).report
    v = report.versions
    assert v["executorch"] == __import__("importlib.metadata").metadata.version("executorch")
    assert v["pte_schema"] == out.read_bytes()[4:8].decode() == "ET12"
    assert v["npu_compilers"] == {"vela": vela_version}
    assert v["runtime"] == "EthosUBackend" and "Vela bin stream" in v["delegate_payload"]
    assert cli.main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"npu compiler vela {vela_version}" in printed and "pte_schema ET12" in printed
    assert "EthosUBackend" in printed and "cortex_m::quantize_per_tensor.out" in printed
