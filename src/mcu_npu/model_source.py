"""Where a model comes from, as the command line and the grids name it: ``file.py:factory``,
``package.module:factory`` (an importable module), a module-level callable, or a ``.pt2``
file saved by ``torch.export.save``. A factory returns ``(model, example_inputs)`` or
``(model, example_inputs, calibration)``. Naming a model by its factory is what lets it
cross a process boundary (``mcu_npu.grid``): the factory's name is sent, not the module.

Also the ``.npz`` sample files the command line reads (calibration, accuracy, bundled)."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Callable

from .errors import ConfigError, first_line


def model_name(spec) -> str:
    """A short name for a model source: the factory's name (``resnet8``), a ``.pt2`` file's
    stem, a callable's ``__name__``, a ``functools.partial``'s first text argument (a
    factory of many models, given the one's name)."""
    if isinstance(spec, str):
        if spec.endswith(".pt2"):
            return Path(spec).stem
        return spec.rpartition(":")[2] or spec
    if isinstance(spec, functools.partial):
        named = [a for a in spec.args if isinstance(a, str)]
        return named[0] if named else model_name(spec.func)
    return getattr(spec, "__name__", type(spec).__name__)


def model_names(specs) -> list[str]:
    """``model_name`` of each spec, made unique: two ``factory`` functions of different files
    are told apart by their file's stem (``kws:factory``), else by the whole spec."""
    names = [model_name(s) for s in specs]
    shared = {n for n in names if names.count(n) > 1}
    for i, (spec, name) in enumerate(zip(specs, names)):
        if name in shared and isinstance(spec, str) and ":" in spec:
            where, _, fn = spec.rpartition(":")
            names[i] = f"{Path(where).stem if where.endswith('.py') else where}:{fn}"
    return [n if names.count(n) == 1 else str(s) for s, n in zip(specs, names)]


def load_model_spec(spec) -> tuple:
    """``spec`` (see the module's docstring) -> ``(model, example inputs as a tuple,
    calibration or None)``; ConfigError naming the spec when it cannot be read or its
    factory fails."""
    if isinstance(spec, str) and spec.endswith(".pt2"):
        from .flow.export import exported_model

        model, inputs = exported_model(spec, None)
        if inputs is None:
            raise ConfigError(f"{spec!r} holds no example inputs: save it with "
                              f"torch.export.save(torch.export.export(model, inputs), ...)")
        return model, inputs, None
    fn = factory(spec)
    try:
        result = fn()
    except Exception as exc:  # the user's code: any type
        raise ConfigError(f"the model factory {_label(spec)} failed: {type(exc).__name__}: "
                          f"{first_line(exc)}") from exc
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise ConfigError(f"{_label(spec)} must return (model, example_inputs) "
                          f"or (model, example_inputs, calibration)")
    import torch

    model, inputs = result[0], result[1]
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    return model, inputs, result[2] if len(result) == 3 else None


def check_source(spec) -> None:
    """Check, without importing or running anything, that ``spec`` names something that can
    be there: the file exists and defines ``factory`` at its top level, or the module can be
    found; ConfigError otherwise. For a grid, before any worker starts."""
    if callable(spec) or not isinstance(spec, str):
        return
    if spec.endswith(".pt2"):
        if not Path(spec).is_file():
            raise ConfigError(f"model file {spec!r} not found")
        return
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ConfigError(f"MODEL must be FILE.py:FACTORY, MODULE:FACTORY or FILE.pt2, "
                          f"got {spec!r}")
    if not where.endswith(".py"):
        try:
            found = importlib.util.find_spec(where)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise ConfigError(f"cannot find module {where!r} (a model file needs its .py "
                              f"suffix)")
        return
    if not Path(where).is_file():
        raise ConfigError(f"model file {where!r} not found")
    try:
        tree = ast.parse(Path(where).read_text(), where)
    except (SyntaxError, ValueError, OSError) as exc:
        raise ConfigError(f"cannot read model file {where!r}: {first_line(exc)}") from exc
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Name)}
    defined |= {(a.asname or a.name).split(".")[0] for n in tree.body
                if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    if name not in defined:
        raise ConfigError(f"{where!r} has no function {name!r}")


def factory(spec) -> Callable:
    """The factory function ``spec`` names (a callable passes through)."""
    if callable(spec):
        return spec
    if not isinstance(spec, str):
        raise ConfigError(f"a model is FILE.py:FACTORY, MODULE:FACTORY, FILE.pt2 or a "
                          f"callable, not {type(spec).__name__}")
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ConfigError(f"MODEL must be FILE.py:FACTORY, MODULE:FACTORY or FILE.pt2, "
                          f"got {spec!r}")
    module = _module_of_file(where) if where.endswith(".py") else _module_named(where)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"{where!r} has no function {name!r}")
    return fn


def _module_of_file(path: str):
    if not Path(path).is_file():
        raise ConfigError(f"model file {path!r} not found")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, str(Path(path).resolve().parent))
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        raise ConfigError(f"importing {path!r} failed: {first_line(exc)}") from exc
    finally:
        sys.path.pop(0)
    return module


def _module_named(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ConfigError(f"cannot import module {name!r} (a model file needs its .py "
                          f"suffix): {first_line(exc)}") from exc


def _label(spec) -> str:
    return spec if isinstance(spec, str) else \
        f"{getattr(spec, '__module__', '?')}.{getattr(spec, '__qualname__', spec)}"


def load_calibration(path: str, example_inputs: tuple, what: str = "calibration") \
        -> list[tuple]:
    """An .npz with one array per model input (in order), each [N, *input shape]."""
    import numpy as np
    import torch

    if not Path(path).is_file():
        raise ConfigError(f"{what} file {path!r} not found")
    try:
        data = np.load(path)
        arrays = [data[k] for k in data.files] if hasattr(data, "files") else [data]
    except Exception as exc:
        raise ConfigError(f"cannot read {what} file {path!r}: {first_line(exc)}") from exc
    if len(arrays) != len(example_inputs):
        raise ConfigError(f"{what} file has {len(arrays)} arrays but the model takes "
                          f"{len(example_inputs)} inputs")
    for i, (a, e) in enumerate(zip(arrays, example_inputs)):
        if tuple(a.shape[1:]) != tuple(e.shape):
            raise ConfigError(f"{what} array {i} has shape {tuple(a.shape)}; expected "
                              f"(N, {', '.join(map(str, e.shape))}) to match input {i}")
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise ConfigError(f"{what} arrays hold different numbers of samples")
    return [tuple(torch.from_numpy(np.ascontiguousarray(a[k])).to(e.dtype)
                  for a, e in zip(arrays, example_inputs)) for k in range(n)]
