"""The project's exception hierarchy: one base, one class per kind of failure; ``stage``
turns a failure inside ExecuTorch, torch or an NPU compiler into one of them."""

import inspect
import os
import re
import warnings
from contextlib import contextmanager
from typing import Callable

from .progress import begin as begin_stage


class McuNpuError(Exception):
    """Base class of every error mcu-npu raises on purpose."""


class ConfigError(McuNpuError, ValueError):
    """A setting is invalid: unknown target, bad option value, mismatched calibration data."""


class UnsupportedModelError(McuNpuError):
    """The model, or a node of it, cannot be handled (export failed, op not convertible)."""


class ConversionError(UnsupportedModelError):
    """A node reached the TFLite converter that it cannot convert; ``node`` names it (the
    Edge node being converted) when known."""

    def __init__(self, message: str, *, node: str | None = None):
        super().__init__(message)
        self.node = node


class PartitionError(McuNpuError):
    """An NPU partition could not be converted or compiled; ``nodes`` are its compute nodes
    (Edge names), so the compile can plan them again on the CPU."""

    def __init__(self, message: str, *, nodes: tuple[str, ...] = ()):
        super().__init__(message)
        self.nodes = tuple(nodes)


class NpuCompilerError(McuNpuError):
    """An NPU compiler (Vela, the Neutron converter) failed; carries its inputs and message."""

    def __init__(self, message: str, *, tool: str = "", details: str = ""):
        super().__init__(message if not details else f"{message}\n{details}")
        self.tool = tool
        self.details = details


class InvalidProgramError(McuNpuError):
    """A .pte file or payload is missing, corrupt, or cannot run on the host."""


class HostDataMissingError(InvalidProgramError):
    """Running a program on the host needs what only its companion file holds (the graphs
    behind vendor NPU payloads), and the companion was not given."""


class RuntimeUnavailableError(McuNpuError):
    """The runtime asked for cannot be set up on this host (``run(runtime="executorch")``
    without a C++ compiler or ExecuTorch's C++ headers); the message says what to install."""


class MemoryFitError(McuNpuError):
    """The program does not fit the target's memory (``compile(..., strict=True)``)."""


class OutputError(McuNpuError, OSError):
    """An output file cannot be written (a folder or a file in the way, no permission, a
    full disk); the message names the path and the cause. Nothing was written."""


class InputError(McuNpuError, ValueError):
    """Data handed to a program does not match what it expects (shape, dtype, count)."""


# --- warnings ----------------------------------------------------------------------------------
class McuNpuWarning(UserWarning):
    """A warning of mcu-npu's (``warn_user``): what the CLI prints as ``mcu-npu: warning:``
    and a grid row keeps, and what a user's ``warnings.filterwarnings`` can name."""


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_user(message: str, category: type[McuNpuWarning] = McuNpuWarning) -> None:
    """Warn, naming the user's line that called into mcu-npu: the frame just outside the
    outermost mcu-npu frame on the stack, however deep in the flow the warning is raised
    and whatever torch or ExecuTorch frames lie between (a pass torch's pass manager runs,
    the user's ``forward`` under export)."""
    frame, level, outermost = inspect.currentframe().f_back, 1, 1
    while frame is not None:
        if frame.f_code.co_filename.startswith(_PACKAGE):
            outermost = level
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=outermost + 2)


# --- failures from inside ExecuTorch, torch or an NPU compiler ------------------------------
REPORT_HINT = "report it to the mcu-npu maintainers with this message and the model"


@contextmanager
def stage(name: str, hint: str | Callable[[str], str] = "",
          error: type[McuNpuError] | None = None, show: bool = True):
    """Run a step of the compile flow: an ``McuNpuError`` passes unchanged, any other
    exception is raised as ``error`` (``UnsupportedModelError``) naming the stage, the node
    and op being processed when the exception or its traceback shows them, the exception's
    type and first line, and what the user can do (``hint``: text, where ``{op}`` stands for
    the op's name, or a function of the op's name, "" when unknown). The original exception
    is chained as ``__cause__``.

    ``name`` is a gerund phrase: ``with stage("lowering to the Cortex-M kernels"): ...``
    reads "lowering to the Cortex-M kernels failed at node 'conv1d' (aten.convolution): ..."
    The active ``progress.Progress``, if any, shows ``name`` as the step starts (unless
    ``show`` is False: a step that only encloses others).
    """
    if show:
        begin_stage(name)
    try:
        yield
    except McuNpuError:
        raise
    except Exception as exc:  # noqa: BLE001  (ExecuTorch, torch and Vela raise any type)
        raise stage_error(name, exc, hint, error) from exc


def stage_error(name: str, exc: BaseException, hint: str | Callable[[str], str] = "",
                error: type[McuNpuError] | None = None) -> McuNpuError:
    """The ``McuNpuError`` ``stage`` raises for ``exc``: its message, and the ``stage``,
    ``node``, ``op`` and ``hint`` found, as attributes."""
    node, op, source = _failing(exc)
    root = root_cause(exc)
    where = ""
    if node and op:
        where = f" at node {node!r} ({op})"
    elif node or op:
        where = f" at {'node ' + repr(node) if node else op}"
    if source:
        where += f", from {source}"
    what = f"{type(root).__name__}: {first_line(root)}" if first_line(root) else type(root).__name__
    todo = hint(op) if callable(hint) else (hint or REPORT_HINT).replace("{op}", op or "the op")
    err = (error or UnsupportedModelError)(f"{name} failed{where}: {what}\nTo work around it: {todo}")
    err.stage, err.node, err.op, err.hint, err.source = name, node, op, todo, source
    return err


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, ExecuTorch's op schemas shortened to the
    op's name; "" when it has none."""
    text = str(exc).strip()
    line = text.splitlines()[0].strip() if text else ""
    return re.sub(r"<EdgeOpOverload: ([\w.:]+)>: schema = .*?\)\s*->\s*(\([^)]*\)|[\w\[\]?]+)",
                   r"\1", line)


def _chain(exc: BaseException):
    """``exc`` and the exceptions it was raised from or while handling, outermost first."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception ``exc`` was explicitly raised from (``raise ... from``) that
    has a message: ExecuTorch's pass managers wrap the real error in a generic one."""
    root = exc
    while root.__cause__ is not None and first_line(root.__cause__):
        root = root.__cause__
    return root


_FX_NODE = re.compile(r"While executing %(\w+) : .*?call_function\[target=([\w.:]+)\]")
_NODE_LOCALS = ("node", "n", "cur_node", "current_node")


def failing_node(exc: BaseException) -> tuple[str, str]:
    """(node, op) the failure happened at, as far as the exception shows them; "" each when
    unknown. Sources, most specific first: the ``While executing %name`` note torch.fx's
    interpreter adds, then the innermost traceback frame (deepest exception first) holding
    an FX call node in a local named like ``node``. A node traced back to the quantized
    graph is named as the compile report names it (``mcu_npu_id``)."""
    return _failing(exc)[:2]


def _failing(exc: BaseException) -> tuple[str, str, str]:
    """``failing_node``'s (node, op), and the model source line the node came from ("" when
    unknown)."""
    chain = list(_chain(exc))
    for e in chain:
        m = _FX_NODE.search(str(e))
        if m:
            return m.group(1), _op_name(m.group(2)), ""
    for e in reversed(chain):
        frames = []
        tb = e.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for frame in reversed(frames):
            for key in _NODE_LOCALS:
                value = frame.f_locals.get(key)
                found = _describe_node(value)
                if found is not None:
                    return (*found, source_line(value))
    return "", "", ""


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*(?:\n(?!\s*File )\s*([^\n]*))?')


def source_line(node) -> str:
    """``path:line (code)`` of the model source a node was traced from (its ``stack_trace``):
    the innermost frame outside torch's own sources, "" when the node has no trace."""
    trace = getattr(node, "meta", {}).get("stack_trace") or ""
    frames = _FRAME.findall(trace)
    if not frames:
        return ""
    own = [f for f in frames if "/torch/" not in f[0].replace("\\", "/")]
    path, line, code = (own or frames)[-1]
    return f"{path}:{line}" + (f" ({code.strip()})" if code.strip() else "")


def _describe_node(node) -> tuple[str, str] | None:
    import torch
    from torch.fx import Node

    if not isinstance(node, Node) or node.op != "call_function":
        return None
    custom = node.meta.get("custom") or {}
    name = custom.get("mcu_npu_id") or node.name
    target = node.target
    label = str(target) if isinstance(target, torch._ops.OpOverload) else \
        getattr(target, "__name__", None) or str(target)
    return str(name), _op_name(label)


def _op_name(target: str) -> str:
    """``aten.convolution.default`` -> ``aten.convolution``: the name
    ``operators_not_to_delegate`` and the report use."""
    target = str(target).replace("::", ".").removeprefix("torch.ops.")
    return target[: -len(".default")] if target.endswith(".default") else target
