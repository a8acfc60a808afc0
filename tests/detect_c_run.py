"""Build the C that ``firmware.detect_c`` writes as a host program with gcc, on outputs
compiled into it, and read back its detections (issue 52, deliver 3)."""

from __future__ import annotations

import subprocess

import numpy as np
import torch

from mcu_npu.firmware.detect_c import HEADER, SOURCE, detect_files

FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"]

MAIN = r"""
#include <stdio.h>
#include "mcu_npu_detect.h"
%(arrays)s
static mcu_npu_detect_work_t work;
int main(void) {
    const mcu_npu_detect_elem_t *outs[MCU_NPU_DETECT_NUM_OUTPUTS] = {%(names)s};
    mcu_npu_detection_t dets[MCU_NPU_DETECT_MAX_BOXES];
    int n = mcu_npu_detect(outs, &work, dets), i;
    printf("%%d\n", n);
    for (i = 0; i < n; i++)
        printf(%(fmt)s, (unsigned long)dets[i].anchor, (unsigned)dets[i].cls,
               %(cast)sdets[i].score, %(cast)sdets[i].x1, %(cast)sdets[i].y1,
               %(cast)sdets[i].x2, %(cast)sdets[i].y2);
    return 0;
}
"""


def _array(name: str, t: torch.Tensor, integer: bool) -> str:
    flat = t.detach().reshape(-1).numpy()
    if integer:
        body = ",".join(str(int(v)) for v in flat)
    else:
        body = ",".join(float(np.float32(v)).hex() + "f" for v in flat)
    return f"static const mcu_npu_detect_elem_t {name}[{flat.size}] = {{{body}}};"


def run_c(plan, outputs, folder) -> list[tuple]:
    """Detections of the C for ``plan`` on ``outputs``, compiled with the host gcc: rows
    ``(anchor, class, score, x1, y1, x2, y2)`` as ints (int8 path) or floats (float)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in detect_files(plan).items():
        (folder / name).write_text(text)
    integer = plan.integer
    used = set(plan.used_outputs)
    arrays = "\n".join(_array(f"out{k}", outputs[k], integer) for k in sorted(used))
    names = ", ".join(f"out{k}" if k in used else "0" for k in range(plan.num_outputs))
    fmt = '"%lu %u' + (" %ld" * 5 if integer else " %a" * 5) + '\\n"'
    cast = "(long)" if integer else "(double)"
    (folder / "main.c").write_text(MAIN % {"arrays": arrays, "names": names, "fmt": fmt,
                                           "cast": cast})
    exe = folder / "detect"
    subprocess.run(["gcc", *FLAGS, "-o", str(exe), "main.c", SOURCE], check=True,
                   cwd=folder)
    assert (folder / HEADER).exists()
    lines = subprocess.run([str(exe)], check=True, capture_output=True,
                           text=True).stdout.split("\n")
    count = int(lines[0])
    rows = []
    for line in lines[1:1 + count]:
        f = line.split()
        values = [int(v) for v in f[2:]] if integer else [float.fromhex(v) for v in f[2:]]
        rows.append((int(f[0]), int(f[1]), *values))
    return rows


def host_rows(d) -> list[tuple]:
    """The host's ``Detections`` as ``run_c``'s rows."""
    return [(int(a), int(c), s, *b) for a, c, s, b in
            zip(d.anchors.tolist(), d.classes.tolist(), d.raw_scores.tolist(),
                d.raw_boxes.tolist())]
