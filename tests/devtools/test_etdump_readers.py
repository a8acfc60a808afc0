"""Our ETDump and ETRecord in the tools that read ExecuTorch's: ``Inspector`` finds the run
under the block the runtime names "Execute" (and the method load under "Default"),
``inspector_cli --compare_results`` compares the run's outputs with the reference, and the
Model Explorer extension's ETDump provider overlays the run's times on the ETRecord graph."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch

import mcu_npu

pytestmark = pytest.mark.xdist_group("devtools-etdump-readers")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(144, 3), torch.nn.Sigmoid()).eval()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A small program on corstone-300 (an NPU partition and Cortex-M / portable kernels),
    its ETRecord, and an ETDump with a debug buffer of a run on its example inputs."""
    out = tmp_path_factory.mktemp("etdump-readers")
    model = _model()
    x = (torch.randn(1, 1, 8, 8, generator=torch.Generator().manual_seed(1)),)
    calibration = [(torch.randn(1, 1, 8, 8, generator=torch.Generator().manual_seed(k)),)
                   for k in range(8)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        prog = mcu_npu.compile(model, x, "corstone-300", calibration=calibration,
                               operators_not_to_delegate=["aten.sigmoid.default"],
                               etrecord=out / "m.etrecord", progress=False)
    outputs = prog.run(*x, etdump=out / "m.etdp", debug_buffer=out / "m.bin",
                       bundled_input_index=0)
    with torch.no_grad():
        expected = model(*x)
    return out, outputs, expected


def _inspector(out):
    from executorch.devtools import Inspector

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Inspector(etdump_path=str(out / "m.etdp"), etrecord=str(out / "m.etrecord"),
                         debug_buffer_path=str(out / "m.bin"))


def test_blocks_and_events_are_named_as_the_runtime_names_them(run):
    out, outputs, expected = run
    blocks = {b.name: b for b in _inspector(out).event_blocks}
    assert list(blocks) == ["Default", "Execute"]
    assert [e.name for e in blocks["Default"].events] == ["Method::init",
                                                          "Program::load_method"]
    names = [e.name for e in blocks["Execute"].events]
    assert names[-1] == "Method::execute"
    assert "DELEGATE_CALL" in names and "OPERATOR_CALL" in names
    assert any(n.startswith("native_call_") for n in names)
    delegated = [e for e in blocks["Execute"].events if e.is_delegated_op]
    assert delegated and all(e.delegate_backend_name == "EthosUBackend" for e in delegated)
    execute = blocks["Execute"]
    assert execute.bundled_input_index == 0
    torch.testing.assert_close(execute.run_output[0], outputs[0], rtol=0, atol=0)
    torch.testing.assert_close(execute.reference_output[0], expected, rtol=0, atol=0)


def test_inspector_cli_compares_the_run_with_the_reference(run, tmp_path):
    out, outputs, expected = run
    done = subprocess.run(
        [sys.executable, "-m", "executorch.devtools.inspector.inspector_cli",
         "--etdump_path", out / "m.etdp", "--etrecord_path", out / "m.etrecord",
         "--debug_buffer_path", out / "m.bin", "--compare_results"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**os.environ, "MPLBACKEND": "Agg"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Execute" in done.stdout and "DELEGATE_CALL" in done.stdout
    # compare_results plots one figure per metric of the "Execute" block's outputs
    for metric in ("snr", "mse", "cosine_similarity"):
        assert (tmp_path / f"{metric}_output_plot.png").stat().st_size > 0
    from executorch.devtools.inspector import compare_results

    block = [b for b in _inspector(out).event_blocks if b.name == "Execute"][0]
    snr = compare_results(block.reference_output, block.run_output, metrics=["snr"])["snr"]
    noise = (outputs[0] - expected).pow(2).mean()
    assert snr == [pytest.approx(float(10 * torch.log10(expected.pow(2).mean() / noise)),
                                 abs=0.01)]  # the program's output against the float model


def test_model_explorer_etdump_provider_overlays_the_run(run):
    out, _, _ = run
    import etrecord_adapter_model_explorer.main  # noqa: F401  (the provider needs it loaded)
    from etdump_data_provider_model_explorer.provider import ETDumpProfilingOverlayProvider
    from etrecord_adapter_model_explorer.builder.builder import ETRecordGraphBuilder

    graph = ETRecordGraphBuilder(out / "m.etrecord", settings={}).build()[0].graphs[0]
    provider = ETDumpProfilingOverlayProvider()
    result = provider.run(provider_id=provider.metadata.id, model_path=str(out / "m.etrecord"),
                          graph_id=graph.id, config_values={"etdump_path": str(out / "m.etdp")},
                          graph=graph)
    assert result.error == "", result.error
    overlays = {o.name: o.results for o in result.result}
    assert "Runtime Total Avg (ms)" in overlays
    timed = overlays["Runtime Total Avg (ms)"]
    nodes = {n.id: n for n in graph.nodes}
    ops = {nodes[i].label.lower() for i in timed}  # layer classes, from nn_module_stack
    assert any("conv" in op for op in ops) and any("sigmoid" in op for op in ops), ops
    assert all(r.value > 0 for r in timed.values())
