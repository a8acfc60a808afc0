"""The debugging tools on a small program that runs on both the NPU and the Cortex-M: the
device program does not change, CPU kernels and NPU operators get rows, the C header can carry
the bundled program, bad requests get clear errors."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

import mcu_npu
from executorch.devtools import Inspector
from mcu_npu.backend import delegate
from mcu_npu.device.npu_ops import identifier
from mcu_npu.errors import ConfigError

from helpers import MixedNpuCpu, run_cli

TARGET = "corstone-300"
ONE_COMPILE = pytest.mark.xdist_group("devtools-mixed")


def example() -> tuple[torch.Tensor]:
    return (torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0)),)


def compile_mixed(**kwargs):
    """Two NPU partitions around a gelu kept on the Cortex-M."""
    torch.manual_seed(0)
    return mcu_npu.compile(MixedNpuCpu().eval(), example(), TARGET, calibration=[example()],
                           operators_not_to_delegate=["aten.gelu"], **kwargs)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    out = tmp_path_factory.mktemp("mixed")
    return compile_mixed(etrecord=out / "m.etrecord"), out


@ONE_COMPILE
def test_device_program_is_the_same_with_or_without_etrecord_and_debug_handles(mixed,
                                                                               monkeypatch):
    prog, _ = mixed
    assert compile_mixed().buffer == prog.buffer
    built = []

    def no_map(*args, **kwargs):
        built.append(1)
        return {}

    monkeypatch.setattr(delegate, "delegate_debug_map", no_map)
    assert compile_mixed().buffer == prog.buffer
    assert built  # the map was left out of that compile


@ONE_COMPILE
def test_cpu_kernels_and_npu_operators_get_rows_with_times(mixed, tmp_path):
    prog, out = mixed
    outputs = prog.run(*example(), etdump=tmp_path / "m.etdp")
    assert all(torch.equal(a, b) for a, b in zip(outputs, prog.run(*example())))
    assert not list(tmp_path.glob("*.bin"))  # no debug buffer unless asked
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = Inspector(etdump_path=str(tmp_path / "m.etdp"),
                       etrecord=str(out / "m.etrecord")).to_dataframe()
    rows = {name: (types, raw[0]) for name, types, raw in
            zip(df["event_name"], df["op_types"], df["raw"])}
    gelu = [name for name, (types, _) in rows.items() if "aten.gelu.default" in types]
    assert gelu and all(name.startswith("native_call_") and rows[name][1] > 0 for name in gelu)
    npu = df[df["is_delegated_op"]]
    assert len(prog.report.partitions) == 2
    assert len(npu) == sum(len(p.tflite_ops) for p in prog.report.partitions)
    assert (npu["raw"].map(lambda r: r[0]) > 0).all()


@ONE_COMPILE
def test_loaded_program_writes_the_same_etdump(mixed, tmp_path):
    prog, _ = mixed
    pte = prog.save(tmp_path / "m.pte")
    prog.run(*example(), etdump=tmp_path / "a.etdp", debug_buffer=tmp_path / "a.bin")
    mcu_npu.load(pte).run(*example(), etdump=tmp_path / "b.etdp",
                          debug_buffer=tmp_path / "b.bin")
    assert (tmp_path / "a.etdp").read_bytes() == (tmp_path / "b.etdp").read_bytes()
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()


@ONE_COMPILE
def test_c_header_carries_the_bundled_program(mixed, tmp_path):
    prog, _ = mixed
    xs = [example(), (torch.zeros(1, 3, 8, 8),)]
    made = prog.save_bundled(tmp_path / "m.bpte", xs)
    text = prog.save_c_header(tmp_path / "m.h", bundled_inputs=xs).read_text()
    body = text.split("= {", 1)[1].rsplit("};", 1)[0]
    array = bytes(int(b, 16) for b in re.findall(r"0x([0-9a-f]{2})", body))
    assert array == (tmp_path / "m.bpte").read_bytes() == made.data
    assert f"#define MODEL_PTE_SIZE {len(made.data)}u" in text
    assert "#define MODEL_PTE_BUNDLED_TEST_CASES 2" in text
    assert f"#define MODEL_PTE_BUNDLED_ATOL {made.tolerance.atol!r}" in text
    plain = prog.save_c_header(tmp_path / "p.h").read_text()
    assert "BUNDLED" not in plain


@ONE_COMPILE
def test_cli_writes_etdump(mixed, tmp_path):
    import numpy as np

    prog, _ = mixed
    pte = prog.save(tmp_path / "m.pte")
    np.save(tmp_path / "x.npy", example()[0].numpy())
    done = run_cli("run", pte, "--input", tmp_path / "x.npy", "--etdump", tmp_path / "m.etdp",
                   "--debug-buffer", tmp_path / "m.bin")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "m.etdp").stat().st_size > 0 and (tmp_path / "m.bin").stat().st_size > 0
    alone = run_cli("run", pte, "--input", tmp_path / "x.npy", "--debug-buffer",
                    tmp_path / "only.bin")
    assert alone.returncode == 2 and "give etdump= too" in alone.stderr
    assert not (tmp_path / "only.bin").exists()


def test_debug_buffer_needs_an_etdump_and_auto_precision_no_etrecord(tmp_path):
    with pytest.raises(ConfigError, match="precision='auto'"):
        mcu_npu.compile(MixedNpuCpu().eval(), example(), TARGET, precision="auto",
                        etrecord=tmp_path / "m.etrecord")
    assert not (tmp_path / "m.etrecord").exists()


def test_identifiers_are_no_substring_of_one_another():
    ids = [identifier(k, "CONV_2D") for k in range(200)]
    assert not [(a, b) for a in ids for b in ids if a != b and a in b]


@ONE_COMPILE
def test_each_delegate_maps_every_compute_node_of_its_partition(mixed):
    from executorch.devtools.etrecord import parse_etrecord

    prog, out = mixed
    record = parse_etrecord(str(out / "m.etrecord"))
    handle = {n.name: n.meta.get("debug_handle")
              for n in record.edge_dialect_program.graph.nodes}
    delegates = [d["delegate_map"] for d in record._delegate_map["forward"].values()]
    assert len(delegates) == len(prog.report.partitions) == 2
    for mapping, partition in zip(delegates, prog.report.partitions):
        mapped = {h for handles in mapping.values() for h in handles}
        assert {handle[name] for name in partition.ops} <= mapped
        assert len(partition.ops) == len([n for n in partition.ops if handle[n] in mapped]) > 0


@ONE_COMPILE
def test_etrecord_nodes_carry_the_models_layer_names(mixed):
    """Model Explorer and the Inspector name ops by ``nn_module_stack`` / ``torch_fn``:
    quantization's re-export loses both, the flow puts them back on every Edge node."""
    from executorch.devtools.etrecord import parse_etrecord

    from mcu_npu.graph.module_names import layer_name

    _, out = mixed
    record = parse_etrecord(str(out / "m.etrecord"))
    ops = [n for n in record.edge_dialect_program.graph.nodes if n.op == "call_function"
           and "aten." in str(n.target)]
    assert ops and all(n.meta.get("torch_fn") and n.meta.get("nn_module_stack") for n in ops)
    weighted = [layer_name(n) for n in ops if "convolution" in str(n.target)
                or "linear" in str(n.target)]
    assert weighted == ["a", "b", "fc"]
    assert [n.meta["torch_fn"][1].rsplit(".", 1)[-1] for n in ops
            if "gelu" in str(n.target)] == ["gelu"]
