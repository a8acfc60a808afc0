"""The HTML report: one self-contained page holding the report's figures, rendered in a real
headless browser; ``mcu-npu report --html`` writes it; accuracy survives save/load."""

from __future__ import annotations

import copy

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
from mcu_npu.npu.ethos_u import vela_run as vela_run
from mcu_npu.report import Kernel, OpPlacement, Report
from mcu_npu.estimate.latency import PEAK_BASIS, VELA_LAYER_BASIS, npu_op_times
from mcu_npu.report.placement_svg import KERNEL_COLOURS, layers
from mcu_npu.targets import get_target

BROWSER = shutil.which("chromium")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """(program, its saved path): convs on the NPU around a gelu kept on the Cortex-M."""
    torch.manual_seed(0)  # the same weights and input whatever ran before in this worker
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


# reading like the model ------------------------------------------------------------------
def test_ops_carry_layer_names_and_shapes(compiled, page):
    """Each op names the model's module it was called in and its shapes, on the page and in
    the text; the float program's I/O is listed with its shapes."""
    report = compiled[0].report
    weighted = [o for o in report.ops if o.op in ("aten.convolution", "aten.linear")]
    assert [o.layer for o in weighted] == ["a", "b", "fc"]
    assert [o.output_shape for o in weighted] == [(1, 8, 8, 8), (1, 8, 8, 8), (1, 6)]
    assert weighted[0].input_shapes == ((1, 3, 8, 8),)  # the weights are not activations
    assert all(o.output_shape for o in report.ops)
    text = str(report)
    for shapes in ("1x3x8x8 \u2192 1x8x8x8", "1x512 \u2192 1x6"):
        assert html.escape(shapes) in page and shapes.replace("\u2192", "->") in text
    assert re.search(r"\ba\s+aten_convolution_default\s", text)
    assert "Program I/O (float)" in page and "1x3x8x8" in page and "1x6" in page
    assert report.program_io["inputs"][0]["shape"] == [1, 3, 8, 8]
    assert Report.from_json(report.to_json()).ops == report.ops


def test_npu_ops_get_velas_per_layer_cycles(compiled, page):
    """Vela's per-layer cycles land on the ops they were made from and add up to its
    total; the ops table shows each NPU op's time."""
    report = compiled[0].report
    times = report.latency["npu_ops"]
    npu = [o for o in report.ops if o.kernel is Kernel.NPU]
    assert {o.node for o in npu if o.macs} <= set(times)
    assert all(times[o.node]["basis"] == VELA_LAYER_BASIS for o in npu if o.macs)
    for p in report.partitions:
        cycles = sum(times[n]["cycles"] for n in p.ops if n in times)
        assert cycles + p.stats["other_cycles"] == p.stats["total_cycles"]
    conv = next(o for o in npu if o.op == "aten.convolution")
    assert times[conv.node]["cycles"] > 0
    assert f"{times[conv.node]['us']:,.2f}</span>" in page
    assert "NPU time per layer" in page


def test_neutron_per_op_time_is_a_labelled_estimate(compiled):
    """Without per-layer figures from the NPU compiler, an NPU op's time is its MACs at the
    NPU's peak, labelled as such."""
    report = compiled[0].report
    bare = [dataclasses.replace(p, stats={}) for p in report.partitions]
    target = get_target("imxrt700")
    times = npu_op_times(dataclasses.replace(report, partitions=bare), target)
    for o in report.ops:
        if o.kernel is Kernel.NPU and o.macs:
            assert times[o.node]["basis"] == PEAK_BASIS
            assert times[o.node]["cycles"] == -(-o.macs // target.npu.macs_per_cycle)
    page = dataclasses.replace(report, latency={**report.latency, "npu_ops": times}).to_html()
    assert "MACs at the NPU&#x27;s peak" in page and "a lower bound" in page


def _chain(n: int) -> list[OpPlacement]:
    return [OpPlacement(f"op_{i}", "aten.relu", "NPU partition 0", "npu",
                        inputs=(f"op_{i - 1}",) if i else ()) for i in range(n)]


def test_one_outline_per_partition(compiled):
    """A partition whose ops wrap over many rows of the graph is one box, labelled once."""
    report = dataclasses.replace(compiled[0].report, ops=_chain(40), latency={})
    page = report.to_html()
    assert page.count('class="partition"') == 1
    assert page.count(">NPU partition 0 (40 ops)<") == 1


def test_labels_and_memory_wording(compiled, page):
    """Figures read as words with units; the memory placement is said once, with where the
    program lies."""
    for raw in ("npu_scratch_estimated", "planned_total", "npu_clock_hz", "total_cycles",
                "<td>planned</td>"):
        assert raw not in page, raw
    assert "pool 1: " in page and "NPU scratch" in page and "total cycles" in page
    assert re.search(r"Memory placement <b>\w+</b>: .*The program lies in <b>\w+</b>", page)
    assert "The program is placed in" not in page


def test_poor_accuracy_is_a_warning(compiled, page):
    assert "Poor accuracy" not in page and "card bad" not in page
    report = dataclasses.replace(compiled[0].report,
                                 accuracy={"sqnr_db": 0.0, "reference_sqnr_db": 0.0})
    bad = report.to_html()
    assert 'class="card bad"' in bad and "Poor accuracy: SQNR 0.00 dB" in bad
    assert "WARNING: Poor accuracy" in str(report)


def test_what_to_do_when_the_work_around_the_npu_dominates(compiled):
    """An input quantize and transpose taking most of the time get a line saying what the
    project offers against them; a program whose time is the NPU's gets none."""
    report = compiled[0].report
    rows = [{"node": "q", "op": "quantize", "runs_on": "cortex-m", "kind": "quantize",
             "us": 3706.0, "cycles": 1, "basis": "assumed"},
            {"node": "npu partition 0", "op": "executorch_call_delegate", "runs_on": "npu",
             "kind": "npu", "us": 2850.0, "cycles": 1, "basis": "bound"},
            {"node": "npu partition 0 input 0", "op": "NeutronBackend NCHW<->NHWC transpose",
             "runs_on": "cortex-m", "kind": "transpose", "us": 1854.0, "cycles": 1,
             "basis": "assumed"}]
    slow = dataclasses.replace(report, latency={"latency_us": 8410.0, "npu_us": 2850.0,
                                                "cpu_us": 5560.0, "rows": rows})
    page = slow.to_html()
    assert "What to do:" in page and "66% of the estimated latency" in page
    assert "channels_last" in page and "io=&quot;int8&quot;" in page
    assert "what to do: " in str(slow)
    npu_bound = dataclasses.replace(report, latency={"latency_us": 2900.0, "npu_us": 2850.0,
                                                     "cpu_us": 50.0,
                                                     "rows": [rows[1], dict(rows[0], us=50.0)]})
    assert "What to do:" not in npu_bound.to_html()


# the NPU partitions for viewers ----------------------------------------------------------
def test_export_partitions_writes_graphs_viewers_open(compiled, tmp_path, capsys):
    """Each partition's TFLite graph loads in LiteRT with the partition's I/O; Vela's
    optimised graph parses as TFLite, its NPU part one ethos-u operator. The API writes the
    same files as the command."""
    from ai_edge_litert.interpreter import Interpreter

    from mcu_npu.tflite.describe import op_names

    prog, path = compiled
    out = tmp_path / "parts"
    assert main(["report", str(path), "--export-partitions", str(out)]) == 0
    printed = capsys.readouterr().out
    report = prog.report
    names = [f"partition_{k}{tail}.tflite" for k in range(len(report.partitions))
             for tail in ("", "_vela")]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)
    assert all(f"wrote {out / name}" in printed for name in names)
    for k, part in enumerate(report.partitions):
        graph = (out / f"partition_{k}.tflite").read_bytes()
        interpreter = Interpreter(model_content=graph)
        interpreter.allocate_tensors()
        assert op_names(graph) == part.tflite_ops
        assert "ethos-u" in op_names((out / f"partition_{k}_vela.tflite").read_bytes())
    api_out = prog.export_partitions(tmp_path / "api")
    assert [p.read_bytes() for p in api_out] == [(out / p.name).read_bytes() for p in api_out]
    alone = tmp_path / "alone.pte"  # without its companion the graphs are not there
    alone.write_bytes(path.read_bytes())
    assert main(["report", str(alone), "--export-partitions", str(tmp_path / "none")]) == 2
    assert "companion" in capsys.readouterr().err and not (tmp_path / "none").exists()


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
    for figure in ("1x3x8x8 \u2192 1x8x8x8", "NPU time per layer", "Program I/O (float)",
                   "NPU partition 0 ("):  # shapes, per-layer time, I/O, outlines drawn
        assert figure in text, figure


def test_text_sections_wrap_their_long_lines_in_a_narrow_window(compiled, tmp_path):
    """The calibration and precision sections are preformatted text whose lines run long
    (auto's verdict names two SQNRs): in a 600-pixel window every line stays within the
    page, none is cut at its right edge."""
    report = copy.deepcopy(compiled[0].report)
    report.calibration = {**(report.calibration or {}), "method": "auto", "check": {
        "kept": "minmax", "samples": 32, "auto_sqnr_db": 37.97, "minmax_sqnr_db": 38.19}}
    page = report.to_html()
    assert "<section id=\"calibration\"><h2>Calibration</h2><pre>" in page
    probe = ("<script>addEventListener('load',()=>{document.body.dataset.cut=JSON.stringify("
             "[...document.querySelectorAll('section>pre')].filter(p=>p.scrollWidth>"
             "p.clientWidth).map(p=>p.parentElement.id));"
             "document.body.dataset.pres=document.querySelectorAll('section>pre').length})"
             "</script>")
    path = tmp_path / "narrow.html"
    path.write_text(page.replace("</body>", probe + "</body>"))
    dom = _chromium(["--window-size=600,700", "--dump-dom", path.as_uri()], tmp_path)
    assert re.search(r'data-pres="[1-9]', dom), "no preformatted section was measured"
    assert 'data-cut="[]"' in dom, re.search(r'data-cut="[^"]*"', dom).group(0)


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
