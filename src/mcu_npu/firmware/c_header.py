"""The ``.pte`` as a C header for firmware: the program as a 16-byte aligned ``const uint8_t``
array in a chosen linker section, and ``#define``s for what the firmware must size.

The header defines the array, so exactly one ``.c`` file includes it (elsewhere declare
``extern const uint8_t NAME[];``), as with ExecuTorch's ``pte_to_header.py``. The section
decides where the linker puts the program. By default (``section="auto"``) it follows the
program's placement (``report.placement``): ``.<region>.<name>`` for the region of the
target's memory map that holds the program (``.sram.model_pte``, ``.ddr.model_pte``), which
the linker-script snippets of docs/memory.md send there. Any other name can be given:
ExecuTorch's Arm runner links ``network_model_sec`` to DDR or SRAM, while a ``.rodata.*``
name goes wherever the linker script sends ``.rodata``.

Defines, prefixed with the array name in capitals (``MODEL_PTE_``):

- ``SIZE``: bytes of the array;
- ``METHOD_ALLOCATOR_POOL_SIZE``: the method allocator's needs (``report.memory``'s
  estimate of what ``Method::load`` allocates) plus a quarter, rounded up to 16; planned
  buffers not included;
- ``PLANNED_POOL_COUNT``, ``PLANNED_POOL_<i>_SIZE`` (``i`` as in
  ``MethodMeta::memory_planned_buffer_size(i)``, memory id ``i + 1``) and
  ``PLANNED_POOLS_SIZE`` their sum;
- ``NPU_SCRATCH_SIZE`` and ``TEMP_ALLOCATOR_POOL_SIZE``: the largest scratch one NPU
  delegate call takes from the temp allocator;
- where things live, when the report names a target with a memory map: ``PLACEMENT`` (a
  string: ``flash``, ``sram`` or ``dedicated-sram``), ``PROGRAM_REGION`` (the array's),
  ``RAM_REGION`` (the planned pools, the method allocator pool and the NPU scratch) and,
  with Vela's Dedicated_Sram, ``FAST_SCRATCH_REGION`` and ``FAST_SCRATCH_SIZE``;
- ``NUM_INPUTS`` / ``NUM_OUTPUTS`` and per tensor ``INPUT_<k>_DIMS``, ``_SHAPE`` (a brace
  list), ``_NUMEL``, ``_NBYTES``, ``_DTYPE`` (a string), ``_SCALAR_TYPE`` (ExecuTorch's
  ``ScalarType`` code), and for int8 I/O (``compile(io="int8")``) ``_SCALE``,
  ``_ZERO_POINT``, ``_QUANT_MIN``, ``_QUANT_MAX``.

With ``bundled``, the array is the bundled program (``.bpte``, ``devtools.bundled``) and
``BUNDLED``, ``BUNDLED_TEST_CASES``, ``BUNDLED_ATOL`` and ``BUNDLED_RTOL`` (the arguments of
``verify_method_outputs``) are defined.

Figures are for the program's default method ("forward" when it has one).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from ..errors import ConfigError
from .files import write_atomic

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto "
    "if inline int long register restrict return short signed sizeof static struct switch "
    "typedef union unsigned void volatile while _Bool _Complex _Imaginary _Alignas _Alignof "
    "_Atomic _Generic _Noreturn _Static_assert _Thread_local".split())
_SECTION = re.compile(r"[A-Za-z0-9_.$@-]+\Z")
BYTES_PER_LINE = 24
POOL_MARGIN = 1.25
"""The method allocator define is the estimate times this: the estimate's sizes of runtime
structures are not measured on the device."""


def check_name(name: str) -> str:
    """``name`` if it is a C identifier (not a keyword), else ConfigError."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name) or name in _C_KEYWORDS:
        raise ConfigError(f"the C array name {name!r} is not a C identifier: use letters, "
                          "digits and underscores, not starting with a digit, and no C "
                          "keyword (e.g. model_pte)")
    return name


AUTO_SECTION = "auto"
"""The section that follows the program's placement: ``.<region>.<name>``."""


def section_for(report, name: str) -> str:
    """The section of the region that holds the program: ``.<region>.<name>``;
    ``.rodata.<name>`` when the report names no memory map."""
    from ..estimate.memory import placed_target

    target = placed_target(report)
    region = target.region_for("program") if target is not None else None
    return f".{region.name}.{name}" if region is not None else f".rodata.{name}"


def _region_defines(prefix: str, report, fast_scratch: int) -> list[str]:
    from ..estimate.memory import placed_target

    target = placed_target(report)
    if target is None or not target.memory:
        return []
    lines = ["/* where each part lives: regions of the target's memory map (docs/memory.md) */",
             f'#define {prefix}_PLACEMENT "{target.memory_placement}"']
    for role, key in (("program", "PROGRAM"), ("ram", "RAM"), ("fast_scratch", "FAST_SCRATCH")):
        region = target.region_for(role)
        if region is not None:
            lines.append(f'#define {prefix}_{key}_REGION "{region.name}"')
    if target.region_for("fast_scratch") is not None:
        lines.append(f"#define {prefix}_FAST_SCRATCH_SIZE {fast_scratch}u")
    return lines


def check_section(section: str | None) -> str | None:
    """``section`` if it can be a linker section name (None: no section attribute)."""
    if section is None:
        return None
    if not isinstance(section, str) or not _SECTION.match(section):
        raise ConfigError(f"the linker section {section!r} is not a section name: use "
                          "letters, digits and . _ $ @ - (e.g. .rodata.model_pte or "
                          "network_model_sec), or None for no section attribute")
    return section


def _array_lines(data: bytes) -> list[str]:
    """``  0x00,0x01,...,`` lines; ``bytes.hex`` does the formatting (multi-MB programs)."""
    return ["  0x" + data[i:i + BYTES_PER_LINE].hex(",").replace(",", ",0x") + ","
            for i in range(0, len(data), BYTES_PER_LINE)]


def _float(x: float) -> str:
    text = repr(float(x))
    if not math.isfinite(float(x)):
        raise ConfigError(f"quantization scale {x!r} is not finite")
    return text + ("f" if any(c in text for c in ".e") else ".0f")


def _io_defines(prefix: str, program, report) -> list[str]:
    from ..runtime.kernels import dtype_of

    plans = {p.name: p for p in program._pte.program.execution_plan}
    plan = plans.get("forward") or next(iter(plans.values()))
    io = (getattr(report, "io", None) or {}) if report is not None else {}
    lines = []
    for kind, indices in (("INPUT", plan.inputs), ("OUTPUT", plan.outputs)):
        lines.append(f"#define {prefix}_NUM_{kind}S {len(indices)}")
        specs = io.get(kind.lower() + "s", [])
        for k, index in enumerate(indices):
            val = plan.values[index].val
            if type(val).__name__ != "Tensor":
                lines.append(f"/* {kind.lower()} {k} is a {type(val).__name__}, not a "
                             "tensor */")
                continue
            dtype = dtype_of(val.scalar_type)
            shape = [int(d) for d in val.sizes]
            numel = math.prod(shape)
            name = f"{prefix}_{kind}_{k}"
            lines += [
                f"#define {name}_DIMS {len(shape)}",
                f"#define {name}_SHAPE {{{', '.join(map(str, shape))}}}",
                f"#define {name}_NUMEL {numel}",
                f"#define {name}_NBYTES {numel * dtype.itemsize}",
                f'#define {name}_DTYPE "{str(dtype).removeprefix("torch.")}"',
                f"#define {name}_SCALAR_TYPE {int(val.scalar_type)}",
            ]
            spec = specs[k] if k < len(specs) else {}
            if spec.get("scale") is not None:
                lines += [f"#define {name}_SCALE {_float(spec['scale'])}",
                          f"#define {name}_ZERO_POINT ({int(spec['zero_point'])})"]
                for key in ("quant_min", "quant_max"):
                    if spec.get(key) is not None:
                        lines.append(f"#define {name}_{key.upper()} ({int(spec[key])})")
    return lines


def header_text(buffer: bytes, report=None, *, name: str = "model_pte",
                section: str | None = AUTO_SECTION, bundled=None) -> str:
    """The header's text (see the module docstring). ``bundled``: a
    ``devtools.bundled.Bundle`` of this program, which the array then holds instead of the
    ``.pte``, with its test-case count and tolerance as ``#define``s."""
    from ..estimate.memory import program_figures
    from ..runtime.pte import Program

    check_name(name)
    if section == AUTO_SECTION:
        section = section_for(report, name)
    section = check_section(section)
    buffer = bytes(buffer)
    program = Program(buffer)
    figures = program_figures(program, size=len(buffer))
    ram = figures["ram"]
    prefix = name.upper()
    guard = f"{prefix}_H_"
    pools = ram["planned"][1:]  # memory id 0 is reserved
    method_pool = -(-int(ram["method_allocator"] * POOL_MARGIN) // 16) * 16
    scratch = -(-ram["npu_scratch"] // 16) * 16
    target = getattr(report, "target", None) if report is not None else None
    attributes = "aligned(16)" + (f', section("{section}")' if section else "")
    array = bytes(bundled.data) if bundled is not None else buffer
    head = [
        f"/* The ExecuTorch program {name}" + (f" for {target}" if target else "") +
        (" as a bundled program (.bpte: the .pte with test inputs and expected outputs)"
         if bundled is not None else "") +
        f": {len(array)} bytes, and the sizes its firmware must provide.",
        " * Written by mcu-npu. Include in exactly one .c file; elsewhere declare",
        f" * extern const uint8_t {name}[]; */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "",
        f"#define {prefix}_SIZE {len(array)}u",
        *(bundled.defines(prefix) if bundled is not None else ()),
        "/* method allocator: estimate of Method::load's allocations (values, tensor",
        f" * metadata, instructions, delegates: {ram['method_allocator']} bytes) plus "
        "25%; planned buffers not included */",
        f"#define {prefix}_METHOD_ALLOCATOR_POOL_SIZE {method_pool}u",
        "/* planned memory: pool i is MethodMeta::memory_planned_buffer_size(i) */",
        f"#define {prefix}_PLANNED_POOL_COUNT {len(pools)}",
        *(f"#define {prefix}_PLANNED_POOL_{i}_SIZE {n}u" for i, n in enumerate(pools)),
        f"#define {prefix}_PLANNED_POOLS_SIZE {sum(pools)}u",
        "/* NPU scratch: the largest one delegate call takes from the temp allocator" +
        (" (an estimate: the payload does not record it)" if ram["npu_scratch_estimated"]
         else "") + " */",
        f"#define {prefix}_NPU_SCRATCH_SIZE {ram['npu_scratch']}u",
        f"#define {prefix}_TEMP_ALLOCATOR_POOL_SIZE {scratch}u",
        *_region_defines(prefix, report, int((getattr(report, "memory", None) or {}).get(
            "ram", {}).get("fast_scratch", 0))),
        "",
        *_io_defines(prefix, program, report),
        "",
        f"const uint8_t {name}[] __attribute__(({attributes})) = {{",
    ]
    tail = ["};", "", f"#endif /* {guard} */", ""]
    return "\n".join(head + _array_lines(array) + tail)


def write_c_header(path, buffer: bytes, report, *, name: str = "model_pte",
                   section: str | None = AUTO_SECTION, bundled=None) -> Path:
    """Write the ``.pte`` ``buffer`` as a C header at ``path`` (atomically); returns the
    path. ``name``: the array (a C identifier, ConfigError otherwise); ``section``: its
    linker section ("auto": the placement's region, ``section_for``; None: no section
    attribute)."""
    text = header_text(buffer, report, name=name, section=section, bundled=bundled)
    return write_atomic(os.fspath(path), text.encode("ascii"))
