"""The ``compare`` and ``sweep`` commands of ``mcu-npu``: the grid's table and Pareto front
on stdout, a line per finished cell on stderr, the page (``--html``) and the rows
(``--json``) written whole at the end. Everything the command line names (targets, the
model's factory, the config, the output paths) is checked before the first compile. Exit
status 0 when some cell compiled, 1 when none did."""

from __future__ import annotations

import argparse

from ..targets import MEMORY_CHOICES


def add_commands(sub) -> None:
    """Add ``compare`` and ``sweep`` to the ``mcu-npu`` parser's subcommands."""
    c = sub.add_parser("compare", help="compile one model for several targets and set the "
                       "results side by side (fits, latency, NPU share, flash, RAM, accuracy)")
    c.add_argument("model", help="FILE.py:FACTORY or MODULE:FACTORY (returns (model, "
                   "example_inputs[, calibration])), or FILE.pt2")
    c.add_argument("--targets", metavar="T,T,...",
                   help="comma-separated target presets (default: every one `mcu-npu "
                        "targets` lists)")
    c.add_argument("--calibration", help=".npz with one [N, *shape] array per model input")
    c.add_argument("--precision", default="int8", choices=("int8", "int16", "auto"),
                   help="activation precision of every compile (default int8)")
    c.add_argument("--memory", default="auto", choices=MEMORY_CHOICES,
                   help="where each program lives (default auto: the fastest that fits)")
    c.add_argument("--npu-compiler", default="auto",
                   choices=("auto", "reference", "neutron", "vela"),
                   help="the NPU compiler of every compile (default auto; see `mcu-npu "
                        "compile --help`)")
    _common(c)
    c.set_defaults(func=cmd_compare)
    s = sub.add_parser("sweep", help="compile every model x target x precision x memory "
                       "placement of a config file; the table and its Pareto front (latency, "
                       "accuracy, RAM)")
    s.add_argument("config", help="a .toml or .json file naming models (factories), targets, "
                   "precisions and memory placements (see docs: mcu_npu.grid.config)")
    _common(s)
    s.set_defaults(func=cmd_sweep)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--html", metavar="FILE", help="also write the grid as one self-contained "
                   "HTML page (charts and table)")
    p.add_argument("--json", metavar="FILE", help="also write every row as JSON")
    p.add_argument("-j", "--workers", type=int, metavar="N",
                   help="worker processes (default: one per core)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="run the compiles as Ray tasks: 'local' (a Ray instance started here), "
                        "'auto' (the running cluster) or ray://HOST:PORT; needs mcu-npu[ray]")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="stop a compile still running after SECONDS; its row says so (each "
                        "cell then runs in a process of its own)")
    p.add_argument("-q", "--quiet", action="store_true", help="no line per finished cell")


def cmd_compare(args) -> int:
    from ..model_source import check_source, load_calibration, load_model_spec
    from ..targets import targets as all_targets
    from .run import check_targets, compare

    _check(args)
    names = check_targets(args.targets.split(",") if args.targets else all_targets())
    check_source(args.model)
    calibration = None
    if args.calibration:
        _, inputs, _ = load_model_spec(args.model)
        calibration = load_calibration(args.calibration, inputs)
    grid = compare(args.model, targets=names, calibration=calibration,
                   precision=args.precision, memory=args.memory,
                   npu_compiler=args.npu_compiler, **_executor(args))
    return _finish(grid, args)


def cmd_sweep(args) -> int:
    from .config import read_config
    from .run import sweep

    _check(args)
    config = read_config(args.config)
    grid = sweep(config.models, config.targets, config.precisions, config.memory,
                 **_executor(args), **config.options)
    return _finish(grid, args)


def _check(args) -> None:
    from ..errors import ConfigError
    from ..firmware.files import check_outputs

    check_outputs(args.html, args.json)
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"-j/--workers must be at least 1, not {args.workers}")
    if args.ray is not None:
        from .executors import import_ray

        import_ray()
    from .executors import check_timeout

    check_timeout(args.timeout, "ray" if args.ray else "process")


def _executor(args) -> dict:
    return dict(executor="ray" if args.ray else "process", workers=args.workers,
                ray_address=args.ray, progress=not args.quiet, timeout=args.timeout)


def _finish(grid, args) -> int:
    from ..firmware.files import write_all

    print(grid)
    files = [(path, data.encode()) for path, data in ((args.html, grid.to_html() if args.html
                                                       else ""),
                                                      (args.json, grid.to_json() if args.json
                                                       else "")) if path]
    for path in write_all(files):
        print(f"wrote {path}")
    return 0 if any(r.ok for r in grid.rows) else 1
