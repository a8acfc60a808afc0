"""The ``.pte`` as a C header: compiled by the host gcc and by arm-none-eabi-gcc for a
Cortex-M55, the array's bytes, section and alignment, the defines (issue 15, item 4)."""

from __future__ import annotations

import re
import shutil
import subprocess
import warnings

import pytest
import torch
from torch import nn

import mcu_npu
from mcu_npu import cli
from mcu_npu.firmware.c_header import header_text, write_c_header
from mcu_npu.errors import ConfigError

ARM_GCC = shutil.which("arm-none-eabi-gcc")


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


@pytest.fixture(scope="module")
def prog():
    """An int8-I/O program, so the header carries quantization parameters."""
    torch.manual_seed(0)
    x = (torch.randn(1, 2, 6, 6),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # host-only reference payloads
        return mcu_npu.compile(Tiny().eval(), x, target="imxrt700", calibration=[x],
                               io="int8")


DUMP = r"""
#include <stdio.h>
#include "model_pte.h"
_Static_assert(sizeof(model_pte) == MODEL_PTE_SIZE, "array length");
int main(int argc, char **argv) {
    static const int shape[] = MODEL_PTE_INPUT_0_SHAPE;
    FILE *f = fopen(argv[1], "wb");
    if (!f || fwrite(model_pte, 1, sizeof(model_pte), f) != sizeof(model_pte)) return 1;
    fclose(f);
    printf("aligned %d\n", (int)((unsigned long)model_pte % 16 == 0));
    printf("pools %d %u method %u scratch %u\n", MODEL_PTE_PLANNED_POOL_COUNT,
           MODEL_PTE_PLANNED_POOL_0_SIZE, MODEL_PTE_METHOD_ALLOCATOR_POOL_SIZE,
           MODEL_PTE_NPU_SCRATCH_SIZE);
    printf("input %s %d %d %d %d %.9g %d\n", MODEL_PTE_INPUT_0_DTYPE, shape[0], shape[1],
           shape[2], shape[3], (double)MODEL_PTE_INPUT_0_SCALE, MODEL_PTE_INPUT_0_ZERO_POINT);
    return 0;
}
"""


def test_header_round_trips_with_host_gcc(prog, tmp_path):
    prog.save_c_header(tmp_path / "model_pte.h")
    (tmp_path / "dump.c").write_text(DUMP)
    exe = tmp_path / "dump"
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-o", str(exe),
                    str(tmp_path / "dump.c")], check=True, cwd=tmp_path)
    out = subprocess.run([str(exe), str(tmp_path / "bytes.bin")], check=True,
                         capture_output=True, text=True).stdout
    assert (tmp_path / "bytes.bin").read_bytes() == prog.buffer
    memory = prog.report.memory["ram"]
    spec = prog.report.io["inputs"][0]
    assert "aligned 1" in out
    assert f"pools 1 {memory['planned'][1]} " in out
    assert f"scratch {memory['npu_scratch']}" in out
    fields = out.split("input ")[1].split()
    assert fields[:5] == ["int8", "1", "2", "6", "6"]
    assert float(fields[5]) == pytest.approx(spec["scale"], rel=1e-6)
    assert int(fields[6]) == spec["zero_point"]


def _compile_m55(tmp_path, prog, section) -> tuple[str, str]:
    """(readelf -S, objdump -t) of a Cortex-M55 object holding the header's array."""
    write_c_header(tmp_path / "model_pte.h", prog.buffer, prog.report, section=section)
    (tmp_path / "use.c").write_text('#include "model_pte.h"\n')
    obj = tmp_path / "use.o"
    subprocess.run([ARM_GCC, "-mcpu=cortex-m55", "-mthumb", "-std=c11", "-O2", "-c",
                    "-o", str(obj), str(tmp_path / "use.c")], check=True, cwd=tmp_path)
    sections = subprocess.run(["arm-none-eabi-readelf", "-S", "-W", str(obj)], check=True,
                              capture_output=True, text=True).stdout
    symbols = subprocess.run(["arm-none-eabi-objdump", "-t", str(obj)], check=True,
                             capture_output=True, text=True).stdout
    return sections, symbols


@pytest.mark.skipif(ARM_GCC is None, reason="arm-none-eabi-gcc is not installed")
@pytest.mark.parametrize("section", [".rodata.model_pte", "network_model_sec"])
def test_header_for_cortex_m55_section_and_alignment(prog, tmp_path, section):
    sections, symbols = _compile_m55(tmp_path, prog, section)
    row = next(line for line in sections.splitlines() if f" {section} " in line)
    fields = row.split("]", 1)[1].split()  # Name Type Addr Off Size ES Flg Lk Inf Al
    assert fields[0] == section and int(fields[4], 16) == len(prog.buffer)
    assert int(fields[-1]) == 16
    sym = next(line for line in symbols.splitlines() if line.endswith(" model_pte"))
    assert f" {section}\t" in sym and int(sym.split()[0], 16) % 16 == 0


def test_no_section_attribute(prog):
    text = header_text(prog.buffer, prog.report, section=None)
    assert "section(" not in text and "__attribute__((aligned(16)))" in text


@pytest.mark.parametrize("name", ["9model", "my-model", "int", "", "a b"])
def test_name_must_be_a_c_identifier(prog, tmp_path, name):
    with pytest.raises(ConfigError, match="not a C identifier"):
        write_c_header(tmp_path / "x.h", prog.buffer, prog.report, name=name)
    assert not (tmp_path / "x.h").exists()


def test_bad_section_is_refused(prog, tmp_path):
    with pytest.raises(ConfigError, match="not a section name"):
        write_c_header(tmp_path / "x.h", prog.buffer, prog.report, section='a"b')


MODEL_FILE = """
import torch

def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval(), \\
        (torch.randn(1, 4),)
"""


def test_cli_writes_the_header(tmp_path, capsys):
    (tmp_path / "tiny.py").write_text(MODEL_FILE)
    out, header = tmp_path / "tiny.pte", tmp_path / "tiny_pte.h"
    assert cli.main(["compile", f"{tmp_path / 'tiny.py'}:make", "--target", "imxrt700",
                     "-o", str(out), "--c-header", str(header),
                     "--c-section", "network_model_sec"]) == 0
    text = header.read_text()
    assert 'section("network_model_sec")' in text
    array = text.split("= {", 1)[1].split("};", 1)[0]
    data = bytes(int(h, 16) for h in re.findall(r"0x([0-9a-f]{2})", array))
    assert data == out.read_bytes()
    assert f"#define MODEL_PTE_SIZE {len(data)}u" in text
