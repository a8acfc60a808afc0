"""The HTML report: one self-contained page holding the report's figures, rendered in a real
headless browser; ``mcu-npu report --html`` writes it; accuracy survives save/load."""

from __future__ import annotations

import dataclasses
import html
import io
import re
import shutil
import struct
import subprocess
import zlib

import numpy as np
import pytest
import torch

import mcu_npu
from helpers import MixedNpuCpu, calibration_set
from mcu_npu.cli import main
from mcu_npu.npu import vela_run
from mcu_npu.report import Kernel
from mcu_npu.report.placement_svg import KERNEL_COLOURS, layers

BROWSER = shutil.which("chromium")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """(program, its saved path): convs on the NPU around a gelu kept on the Cortex-M."""
    x = (torch.randn(1, 3, 8, 8),)
    prog = mcu_npu.compile(MixedNpuCpu().eval(), x, "corstone-300", calibration_set(x, 2),
                           operators_not_to_delegate=["gelu"])
    path = tmp_path_factory.mktemp("html") / "mixed.pte"
    prog.save(str(path))
    return prog, path


@pytest.fixture(scope="module")
def page(compiled):
    return compiled[0].report.to_html()


def figures(report) -> list[str]:
    """Text the page must show: op counts, SQNR, every node name and reason."""
    s = report.summary
    out = [f"{s['ops_on_npu']}/{s['ops_total']}", f"{report.accuracy['sqnr_db']:.2f} dB",
           f"{report.accuracy['reference_sqnr_db']:.2f} dB", report.target]
    return out + [o.node for o in report.ops] + [o.reason for o in report.ops if o.reason]


def test_the_program_is_mixed(compiled):
    kernels = {o.kernel for o in compiled[0].report.ops}
    assert {Kernel.NPU, Kernel.CORTEX_M} <= kernels


def test_page_is_self_contained_and_holds_the_figures(compiled, page):
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""\b(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert not re.search(r"<link\b|<script\b[^>]*\bsrc|@import|url\(\s*['\"]?(https?:)?//",
                         page, re.I)
    for text in figures(compiled[0].report):
        assert html.escape(text) in page, text
    assert page.count("<svg") >= 1 and "NPU partition 0" in page
    # the edge into and out of the CPU op crosses a partition boundary
    assert page.count('class="edge transfer"') == 2
    assert page == compiled[0].report.to_html()  # deterministic


def test_text_is_escaped(compiled):
    report = dataclasses.replace(compiled[0].report, notes=["<script>alert(1)</script>"],
                                 target="<b>x</b>")
    page = report.to_html()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>x</b>" not in page


def test_missing_and_partial_sections(compiled):
    """No latency or memory: a line says so. Latency rows and memory regions in the shapes the
    estimators may give are drawn, a region over capacity is flagged, transposes marked."""
    report = dataclasses.replace(compiled[0].report, latency={}, memory={})
    page = report.to_html()
    assert "No latency estimate" in page and "No memory figures" in page
    ops = report.ops
    rows = [{"node": "npu partition 0", "op": "executorch_call_delegate", "runs_on": "npu",
             "kind": "npu", "cycles": 2000, "us": 4.0},
            {"node": "permute_0", "op": "permute_copy", "runs_on": "Cortex-M",
             "kind": "transpose", "cycles": 900, "us": 3.0},
            {"node": "aten_gelu_default", "op": "aten.gelu", "runs_on": "Cortex-M",
             "kind": "elementwise", "cycles": 3000, "us": 6.0},
            {"node": "npu partition 1 input 0", "op": "NeutronBackend transpose",
             "runs_on": "cortex-m", "kind": "transpose", "cycles": 700, "us": 2.0}]
    memory = {"regions": {"SRAM": {"capacity": 1000, "used": 1200},
                          "flash": {"size_bytes": 4096, "need": 100, "fits": True,
                                    "parts": {"weights": 60, "commands": 40}}},
              "summary": {"ram_peak_bytes": 1200}}
    page = dataclasses.replace(report, latency={"latency_us": 13.0, "npu_us": 4.0,
                                                "cpu_us": 9.0, "rows": rows},
                               memory=memory).to_html()
    assert "13.0 \u00b5s" in page and "by kind" in page and "permute_0" in page
    # the transposes on the graph: one between the ops it sits between, one on the op that
    # takes partition 1's input
    assert page.count('class="transpose"') == 2
    assert "transpose: npu partition 1 input 0" in page
    assert "does not fit" in page and "over by 200 B" in page and "margin 3,996 B" in page
    assert "weights 60 B" in page and "ram peak bytes" in page  # keys read as words
    assert len(ops) == len(layers(ops))


def test_real_memory_and_latency_render(compiled):
    """Whatever the estimators put in the report renders (figures shown where given)."""
    report = compiled[0].report
    page = report.to_html()
    if isinstance(report.latency.get("latency_us"), (int, float)):
        assert f"{report.latency['latency_us']:,.1f} \u00b5s" in page
    else:
        assert "No latency estimate" in page
    if not report.memory:
        assert "No memory figures" in page


# the page in a real browser -------------------------------------------------------------
def _chromium(args, tmp_path, timeout=60) -> str:
    cmd = [BROWSER, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'profile'}", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}"
    return done.stdout


def decode_png(data: bytes) -> np.ndarray:
    """(height, width, channels) uint8 pixels of an 8-bit RGB/RGBA non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and not interlace, header
    bpp = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8).reshape(height, -1)
    out = np.zeros((height, width * bpp), np.int32)
    prev = np.zeros(width * bpp, np.int32)
    for y in range(height):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if f == 0:
            row = line
        elif f == 1:  # Sub: a running sum per channel
            row = np.cumsum(line.reshape(width, bpp), axis=0).reshape(-1) % 256
        elif f == 2:
            row = (line + prev) % 256
        else:  # Average, Paeth: left to right
            row = line.copy()
            for x in range(width * bpp):
                a = row[x - bpp] if x >= bpp else 0
                b, c = prev[x], (prev[x - bpp] if x >= bpp else 0)
                if f == 3:
                    row[x] = (row[x] + (a + b) // 2) % 256
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                    row[x] = (row[x] + pred) % 256
        out[y], prev = row, row
    return out.reshape(height, width, bpp).astype(np.uint8)


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))


@pytest.mark.skipif(BROWSER is None, reason="chromium is not installed (Debian: apt-get "
                    "install chromium); the page is checked in a headless browser")
def test_page_renders_in_headless_chromium(compiled, page, tmp_path):
    path = tmp_path / "report.html"
    path.write_text(page)
    shot = tmp_path / "shot.png"
    _chromium([f"--screenshot={shot}", "--window-size=1000,700", path.as_uri()], tmp_path)
    pixels = decode_png(shot.read_bytes())[..., :3]
    assert pixels.shape[:2] == (700, 1000)
    flat = pixels.reshape(-1, 3)
    background = np.all(flat >= 240, axis=1).mean()
    assert background < 0.97, f"the screenshot is {100 * background:.1f}% near-white"
    colours = {tuple(c) for c in np.unique(flat, axis=0)}
    assert len(colours) > 50
    for kernel in ("npu", "cortex-m"):  # the graph's boxes, in the graph's colours
        want = np.array(_rgb(KERNEL_COLOURS[kernel]))
        count = int(np.all(flat == want, axis=1).sum())
        assert count > 500, f"{kernel} colour {KERNEL_COLOURS[kernel]}: {count} pixels"
    dom = _chromium(["--dump-dom", path.as_uri()], tmp_path)
    text = html.unescape(re.sub(r"<[^>]+>", " ", dom))
    for figure in figures(compiled[0].report):
        assert figure in text, figure


# the command line and the file ----------------------------------------------------------
def test_cli_writes_the_page(compiled, tmp_path, capsys):
    _, path = compiled
    out = tmp_path / "out.html"
    assert main(["report", str(path), "--html", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert out.read_text() == mcu_npu.load(str(path)).report.to_html()
    for text in figures(mcu_npu.load(str(path)).report):
        assert html.escape(text) in out.read_text()


def test_accuracy_survives_save_and_load(compiled):
    prog, path = compiled
    assert prog.report.accuracy and "sqnr_db" in prog.report.accuracy
    assert mcu_npu.load(str(path)).report.accuracy == prog.report.accuracy


# Vela's status line ---------------------------------------------------------------------
class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_vela_status_line_only_on_a_terminal_for_big_networks():
    big = bytes(vela_run.PROGRESS_BYTES)
    for stream, network, shown in ((io.StringIO(), big, False), (_Terminal(), big[:-1], False),
                                   (_Terminal(), big, True)):
        with vela_run.progress(network, stream):
            pass
        text = stream.getvalue()
        assert bool(text) is shown, text
        if shown:
            assert re.fullmatch(r"Vela: compiling a 8\.0 MiB network \.\.\. \d+\.\d s\n", text)
