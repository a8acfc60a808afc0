"""The ``mcu-npu`` command: compile, run, report, check, targets.

Errors print one line (``mcu-npu: error: ...``) and exit 2; no traceback, no partial output
file. Set MCU_NPU_DEBUG=1 to see tracebacks.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import warnings
from pathlib import Path

from .model_source import load_calibration, load_model_spec  # noqa: F401  (their home)
from .version import __version__

EXIT_ERROR = 2
DEFAULT_TARGET = "imxrt700"
"""``compile``'s target when ``--target`` is not given (``mcu_npu.compile``'s default)."""
NPU_COMPILERS = {
    "auto": "the target's vendor compiler when it is installed, else reference",
    "reference": "mcu-npu's own: payloads the host runs, no device runtime",
    "neutron": "NXP's eIQ Neutron converter, for imxrt700 (needs NXP's eIQ Neutron SDK)",
    "vela": "Arm's Vela, for the Corstone and Ethos-U targets",
}
"""What ``--npu-compiler`` takes (``mcu_npu.npu.COMPILER_NAMES``), with what each is."""


def _quiet() -> None:
    """What reaches the terminal: mcu-npu's warnings as one line each, as they happen (so the
    ones about the arguments come before the work), every time, whatever filters the
    calling process set; the third-party notices nobody can act on are dropped where they
    are logged (``upstream.noise``, installed by ``import mcu_npu``). Called inside
    ``warnings.catch_warnings()``, which restores both."""
    from .errors import McuNpuWarning

    warnings.filterwarnings("always", category=McuNpuWarning)
    warnings.showwarning = _show_warning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """mcu-npu's own warnings (``errors.McuNpuWarning``) as ``mcu-npu: warning: ...``;
    others as Python shows them."""
    from .errors import McuNpuWarning

    if issubclass(category, McuNpuWarning):
        print(f"mcu-npu: warning: {message}", file=file or sys.stderr)
    else:
        _SHOW_WARNING(message, category, filename, lineno, file, line)


_SHOW_WARNING = warnings.showwarning


def precision_arg(args):
    """``compile``'s ``precision`` from ``--precision``, ``--int16``, ``--int8`` and
    ``--target-sqnr`` / ``--max-cycles-ratio`` (for ``auto``)."""
    from .errors import ConfigError
    from .quantization.precision import AutoPrecision, parse_precision

    mode = args.precision
    if mode == "auto":
        if args.int16 or args.int8:
            raise ConfigError("--precision auto chooses the int16 layers itself; drop "
                              "--int16 / --int8")
        return AutoPrecision(target_sqnr_db=args.target_sqnr,
                             max_cycles_ratio=args.max_cycles_ratio)
    if args.target_sqnr is not None:
        raise ConfigError("--target-sqnr goes with --precision auto")
    overrides = {name: "int16" for name in args.int16 or ()}
    for name in args.int8 or ():
        if name in overrides:
            raise ConfigError(f"{name!r} is given both --int16 and --int8")
        overrides[name] = "int8"
    return parse_precision({"default": mode, "overrides": overrides})


def _compile_outputs(args) -> list:
    """Every file ``compile`` writes, for ``check_outputs`` before the compile starts."""
    from .firmware.companion import companion_path

    bpte = Path(args.output).with_suffix(".bpte") if args.bundled else None
    return [args.output, companion_path(args.output), args.etrecord, args.ops_yaml,
            args.c_header, bpte]


def input_arg(args) -> dict | None:
    """``compile``'s ``inputs`` from ``--input-dtype/-layout/-mean/-std`` (input 0), or None."""
    from .errors import ConfigError

    given = {"dtype": args.input_dtype, "layout": args.input_layout,
             "mean": args.input_mean, "std": args.input_std}
    if all(v is None for v in given.values()):
        return None
    for key in ("mean", "std"):
        if given[key] is not None:
            try:
                given[key] = [float(v) for v in given[key].split(",")]
            except ValueError:
                raise ConfigError(f"--input-{key} takes numbers separated by commas, not "
                                  f"{given[key]!r}") from None
    return {k: v for k, v in given.items() if v is not None}


def cmd_compile(args) -> int:
    from .errors import ConfigError
    from .firmware.files import check_outputs
    from .progress import Progress
    from .report import check_io
    from .targets import get_target

    check_outputs(*_compile_outputs(args))  # a path that cannot be written fails now
    check_io(args.io)  # before the compiler and the model load (a factory may train)
    if args.c_header_bundled and not (args.bundled and args.c_header):
        raise ConfigError("--c-header-bundled puts the bundled program in the C header: give "
                          "--bundled INPUTS.npz and --c-header FILE too")
    defaulted = args.target is None
    args.target = DEFAULT_TARGET if defaulted else args.target
    target = get_target(args.target)  # an unknown name fails before PyTorch loads
    with contextlib.nullcontext() if args.quiet else Progress().active() as progress:
        if defaulted:
            _stage(progress, f"target {DEFAULT_TARGET}, the default (--target T for another; "
                             f"`mcu-npu targets` lists them)")
        _stage(progress, "loading PyTorch and ExecuTorch")
        import torch

        # torch's own warning logs: an error reaches the user as one line
        torch._logging.set_logs(all=logging.ERROR)
        # fake-tensor propagation logs (as an error) the traceback of an op it cannot run
        # before raising; the raised error is the one line, the log would add the traceback
        logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
        from . import api
        from .flow.options import compile_options

        options = compile_options(
            target=target, npu_compiler=args.npu_compiler,
            operators_not_to_delegate=args.exclude or (), io=args.io, inputs=input_arg(args),
            outputs=args.outputs, deployable=args.require_deployable, strict=args.strict,
            precision=precision_arg(args), memory=args.memory,
            calibration_method=args.calibration_method, bias_correction=args.bias_correction,
            frame_period_ms=args.frame_period_ms)
        _stage(progress, "loading the model")
        model, inputs, calibration = load_model_spec(args.model)
        if args.calibration:
            calibration = load_calibration(args.calibration, inputs)
        accuracy = load_calibration(args.accuracy_samples, inputs) if args.accuracy_samples \
            else None
        bundled = load_calibration(args.bundled, inputs, "bundled inputs") if args.bundled \
            else None
        prog = api.compile_with(model, inputs, calibration, options,
                                accuracy_samples=accuracy, progress=not args.quiet,
                                etrecord=args.etrecord)
    from .firmware.companion import companion_path

    prog.save(args.output)
    print(prog.report)
    companion = companion_path(args.output)
    print(f"\nwrote {args.output} ({len(prog.buffer):,} bytes: the device program, what the "
          f"board flashes)")
    print(f"wrote {companion} ({companion.stat().st_size:,} bytes: host only, the report and "
          f"what the host runs the NPU partitions with; keep it beside the .pte)")
    if args.ops_yaml:
        prog.save_selected_ops(args.ops_yaml, pte_path=args.output)
        print(f"wrote {args.ops_yaml} (ExecuTorch selected operators)")
    if args.etrecord:
        print(f"wrote {args.etrecord} (ETRecord, for ExecuTorch's Inspector)")
    if bundled is not None:
        bundled = [prog.quantize_inputs(*case) for case in bundled]  # as the program takes them
        bpte = Path(args.output).with_suffix(".bpte")
        made = prog.save_bundled(bpte, bundled)
        print(f"wrote {bpte} (bundled program: {made.cases} test cases; a board's outputs may "
              f"differ by atol {made.tolerance.atol:g}, rtol {made.tolerance.rtol:g}: "
              f"{made.tolerance.basis})")
    if args.c_header:
        prog.save_c_header(args.c_header, section=args.c_section or None,
                           bundled_inputs=bundled if args.c_header_bundled else None)
        what = "the .bpte" if args.c_header_bundled else "the .pte"
        print(f"wrote {args.c_header} ({what} as a C array, pool sizes, I/O)")
    return 0


def _stage(progress, name: str) -> None:
    if progress is not None:
        progress.begin(name)


def cmd_run(args) -> int:
    import numpy as np
    import torch

    from . import api
    from .errors import ConfigError
    from .firmware.files import check_outputs

    check_outputs(args.output, args.etdump, args.debug_buffer)
    prog = api.load(args.program, companion=args.companion)
    inputs = []
    for path in args.input:
        if not Path(path).is_file():
            raise ConfigError(f"input file {path!r} not found")
        try:
            inputs.append(torch.from_numpy(np.load(path)))
        except Exception as exc:
            raise ConfigError(f"cannot read input {path!r}: {_first_line(exc)}") from exc
    outputs = [o.numpy() for o in prog.run(*inputs, etdump=args.etdump,
                                           debug_buffer=args.debug_buffer,
                                           runtime=args.runtime,
                                           bundled_input_index=args.bundled_input_index)]
    for i, o in enumerate(outputs):
        flat = o.reshape(-1)
        preview = np.array2string(flat[:8], precision=4, separator=", ")
        top = f"  (argmax {int(o.argmax())})" if o.ndim == 2 and o.shape[0] == 1 else ""
        print(f"output {i}: shape {tuple(o.shape)} {o.dtype} {preview}"
              f"{' ...' if flat.size > 8 else ''}{top}")
    if args.output:
        _save_outputs(args.output, outputs)
        print(f"wrote {args.output}")
    if args.etdump:
        print(f"wrote {args.etdump} (ETDump; times are the latency model's estimates)")
    if args.debug_buffer:
        print(f"wrote {args.debug_buffer} (the ETDump's intermediate outputs)")
    return 0


def _save_outputs(path: str, outputs) -> None:
    import io

    import numpy as np

    from .firmware.files import write_atomic
    from .errors import ConfigError

    buf = io.BytesIO()
    if path.endswith(".npz"):
        np.savez(buf, *outputs)
    elif len(outputs) == 1:
        np.save(buf, outputs[0])
    else:
        raise ConfigError(f"the program has {len(outputs)} outputs; give an .npz --output path")
    write_atomic(path, buf.getvalue())


def cmd_report(args) -> int:
    from .errors import InvalidProgramError
    from .firmware.companion import saved_report
    from .firmware.files import check_outputs

    check_outputs(args.html)

    loaded = None
    report = None if args.export_partitions else saved_report(args.program, args.companion)
    if report is None:  # the report without torch when it can; the program when it must
        from . import api

        loaded = api.load(args.program, companion=args.companion)
        report = loaded.report
    if report is None:
        from .firmware.companion import companion_path

        raise InvalidProgramError(
            f"{args.program!r} has no mcu-npu NPU delegate to report on and no companion file "
            f"('{args.companion or companion_path(args.program)}') with its report")
    exported = loaded.export_partitions(args.export_partitions, report) \
        if args.export_partitions else []
    if args.html:
        from .firmware.files import write_atomic

        write_atomic(args.html, report.to_html().encode())
    print(report.to_json() if args.json else report)
    if args.html:
        print(f"\nwrote {args.html}")
    for path in exported:
        print(f"wrote {path}")
    return 0


def cmd_check(args) -> int:
    from .errors import ConfigError
    from .firmware.check import check_program

    if args.bundled:
        from . import api

        result = api.check_bundled(args.program, companion=args.companion)
        print(result)
        return 0 if result.ok else 1
    if args.target is None:
        raise ConfigError("check needs --target T (or --bundled to run a .bpte's test cases)")

    problems = check_program(args.program, args.target, args.companion)
    for p in problems:
        print(f"{args.program}: {p}")
    if not problems:
        print(f"{args.program}: no problem found for {args.target}'s board")
    return 1 if problems else 0


def cmd_targets(args) -> int:
    from .targets import get_target, targets

    for name in targets():
        print(f"{name:16s} {get_target(name).description}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mcu-npu", description="Compile PyTorch models for NPU "
                                "microcontrollers (ExecuTorch .pte) and check them on the host.")
    p.add_argument("--version", action="version", version=f"mcu-npu {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="compile a model to a .pte")
    c.add_argument("model", help="FILE.py:FACTORY (returns (model, example_inputs)) or "
                   "FILE.pt2 (saved by torch.export.save; its example inputs are used)")
    c.add_argument("--target", metavar="T",
                   help=f"target preset (see `mcu-npu targets`; default {DEFAULT_TARGET}, "
                        f"said in the progress lines when it is used)")
    c.add_argument("--calibration", help=".npz with one [N, *shape] array per model input")
    c.add_argument("--npu-compiler", default="auto", choices=tuple(NPU_COMPILERS), metavar="C",
                   help="the NPU compiler (default auto): " + "; ".join(
                       f"{name}: {what}" for name, what in NPU_COMPILERS.items()))
    c.add_argument("-q", "--quiet", action="store_true",
                   help="no progress lines (by default each stage of the compile is shown on "
                        "stderr with the seconds elapsed)")
    c.add_argument("--exclude", action="append", metavar="OP",
                   help="keep this op (e.g. aten.convolution) on the CPU; repeatable")
    c.add_argument("--io", default="float", metavar="{float,int8}",
                   help="program inputs/outputs: float (default; quantized on the CPU) or int8 "
                        "(the NPU's tensors as they are; the report gives their scale and "
                        "zero point)")
    c.add_argument("--input-dtype", metavar="{uint8,int8,int16,float}",
                   help="the model's (first) input as the sensor gives it: its element type "
                        "(compile(inputs=InputSpec(dtype=...)))")
    c.add_argument("--input-layout", metavar="{channels_first,channels_last}",
                   help="that input's layout, e.g. channels_last for HWC camera pixels")
    c.add_argument("--input-mean", metavar="M1,M2,...",
                   help="per-channel mean the model subtracts: (x - mean) / std")
    c.add_argument("--input-std", metavar="S1,S2,...", help="per-channel std it divides by")
    c.add_argument("--outputs", metavar="{float,int8}",
                   help="program outputs: float (dequantized) or int8 (default: as --io)")
    c.add_argument("--memory", default="auto", metavar="{auto,flash,sram,dedicated-sram}",
                   help="where the program lives: auto (default: the fastest placement that "
                        "fits the target's memory map), flash (weights read in place), sram, "
                        "or dedicated-sram (Ethos-U65/U85)")
    c.add_argument("--calibration-method", default="auto", metavar="M",
                   help="how activation ranges are set from the calibration data: auto "
                        "(default: per tensor, the lowest measured quantization error, kept "
                        "where the model's output SQNR rises), minmax, histogram, percentile "
                        "or mse")
    c.add_argument("--bias-correction", action="store_true",
                   help="correct each layer's bias after calibration so its int8 outputs keep "
                        "the float model's per-channel means (kept where the model's output "
                        "SQNR on the calibration data rises)")
    c.add_argument("--frame-period-ms", type=float, metavar="MS",
                   help="the time between two calls of a program run as a stream (e.g. 10 "
                        "for 10 ms frames): the report gives a call's time against it and "
                        "the margin to spare")
    c.add_argument("-o", "--output", required=True, help="the .pte to write")
    c.add_argument("--etrecord", metavar="FILE",
                   help="also write the compile's ETRecord (for ExecuTorch's Inspector)")
    c.add_argument("--bundled", metavar="INPUTS.npz",
                   help="also write OUTPUT with suffix .bpte: a bundled program with these "
                   "inputs (one [N, *shape] array per model input) and the host's outputs")
    c.add_argument("--c-header-bundled", action="store_true",
                   help="the --c-header array holds the --bundled program instead of the .pte")
    c.add_argument("--require-deployable", action="store_true",
                   help="fail (no output) unless the program can run on the board: no "
                        "host-only NPU payloads, a kernel for every operator")
    c.add_argument("--ops-yaml", metavar="FILE",
                   help="also write ExecuTorch's selective-build operator list "
                        "(selected_operators.yaml) for the program")
    c.add_argument("--accuracy-samples", metavar="FILE.npz",
                   help="also measure the per-layer error on these inputs (.npz with one "
                        "[N, *shape] array per model input): one row per compute op, largest "
                        "loss first, in the report")
    c.add_argument("--strict", action="store_true",
                   help="fail (no output) when the program does not fit the target's memory")
    c.add_argument("--c-header", metavar="FILE",
                   help="also write the .pte as a C header (aligned const array, pool sizes, "
                        "I/O shapes)")
    c.add_argument("--precision", default="int8", choices=("int8", "int16", "auto"),
                   help="activation type where the NPU runs it: int8 (default), int16 "
                        "(16x8 kernels: int16 activations, int8 weights) or auto (raise the "
                        "layers that buy the most accuracy per cycle to int16)")
    c.add_argument("--int16", action="append", metavar="NAME",
                   help="run this module (e.g. gru, blocks.3) or node with int16 "
                        "activations; repeatable")
    c.add_argument("--int8", action="append", metavar="NAME",
                   help="keep this module or node int8 (with --precision int16); repeatable")
    c.add_argument("--target-sqnr", type=float, metavar="DB",
                   help="--precision auto: the SQNR to reach (default: int8's + 6 dB)")
    c.add_argument("--max-cycles-ratio", type=float, default=1.5, metavar="R",
                   help="--precision auto: NPU cycle budget as a multiple of int8's "
                        "(default %(default)s)")
    c.add_argument("--c-section", default="auto", metavar="NAME",
                   help="linker section of the C header's array (default auto: "
                        "'.<region>.<array name>' of the memory region the program is placed "
                        "in; '' for none)")
    c.set_defaults(func=cmd_compile)
    companion_help = ("the program's companion file (default: the .ptd beside the .pte, "
                      "used when present)")
    r = sub.add_parser("run", help="run a .pte on the host")
    r.add_argument("program")
    r.add_argument("--companion", metavar="PTD", help=companion_help)
    r.add_argument("--input", action="append", required=True, help=".npy per input, in order")
    r.add_argument("--output", help=".npy (one output) or .npz to save the outputs to")
    r.add_argument("--etdump", metavar="FILE",
                   help="write the run's ETDump (for ExecuTorch's Inspector) to FILE")
    r.add_argument("--debug-buffer", metavar="FILE",
                   help="with --etdump: write the intermediate outputs to FILE")
    r.add_argument("--bundled-input-index", type=int, metavar="K",
                   help="with --etdump: the inputs are the ETRecord's representative input K "
                        "(0: the compile's example inputs), so Inspector's compare_results "
                        "sets the run beside their reference outputs")
    r.add_argument("--runtime", choices=("host", "executorch"), default="host",
                   help="host: mcu-npu's Python runtime (default); executorch: ExecuTorch's "
                        "own C++ runtime, the NPU backends moving data as on the device (built "
                        "on first use: needs g++)")
    r.set_defaults(func=cmd_run)
    rp = sub.add_parser("report", help="print a program's compile report (from its companion "
                        "file; without one, what the .pte itself holds)")
    rp.add_argument("program")
    rp.add_argument("--companion", metavar="PTD", help=companion_help)
    rp.add_argument("--json", action="store_true", help="JSON instead of a table")
    rp.add_argument("--html", metavar="FILE",
                    help="also write the report as one self-contained HTML page")
    rp.add_argument("--export-partitions", metavar="DIR",
                    help="write each NPU partition's TFLite graph (and, for Ethos-U, Vela's "
                         "optimised graph) into DIR, for Netron or Model Explorer")
    rp.set_defaults(func=cmd_report)
    ck = sub.add_parser("check", help="check, without running it, that a .pte can run on a "
                        "target's board; one line per problem, exit 1 when any")
    ck.add_argument("program")
    ck.add_argument("--companion", metavar="PTD", help=companion_help)
    ck.add_argument("--target", help="target preset (see `mcu-npu targets`)")
    ck.add_argument("--bundled", action="store_true",
                    help="PROGRAM is a bundled program (.bpte): run its test inputs on the host "
                    "and compare with its expected outputs; exit 1 on a mismatch")
    ck.set_defaults(func=cmd_check)
    t = sub.add_parser("targets", help="list the target presets")
    t.set_defaults(func=cmd_targets)
    from .grid.commands import add_commands

    add_commands(sub)  # compare, sweep
    return p


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    with warnings.catch_warnings():
        _quiet()
        return _run(args)


def _run(args) -> int:
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("mcu-npu: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one readable line; tracebacks only on request
        if os.environ.get("MCU_NPU_DEBUG"):
            raise
        from .errors import McuNpuError

        kind = "error" if isinstance(exc, McuNpuError) else f"internal error ({type(exc).__name__})"
        print(f"mcu-npu: {kind}: {_first_line(exc)}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
