"""Log messages of torch, torchao and ExecuTorch that no user of mcu-npu can act on, dropped
where they are logged. Each filter sits on the one logger that emits its message and matches
that message only; everything else those loggers say still shows.

- torchao, at import: "Failed to load .../torchao/_C_mxfp8...so" (and the other CUDA
  kernel libraries a CPU build cannot load; the CPU kernels it has load);
- torch's pytree: "<enum ...> is an Enum subclass ... Calling register_constant() on Enum
  subclasses is deprecated" (torchao registers its enums so at import);
- ExecuTorch's pass manager: "PassManager is deprecated" (the Cortex-M backend's pass
  manager derives from it);
- torch's pytree, as a FutureWarning: "`isinstance(treespec, LeafSpec)` is deprecated"
  (raised by torch's own ``LeafSpec`` whenever a graph holding one is deep-copied).
"""

from __future__ import annotations

import logging
import re
import warnings

NOISE = {
    "torchao": re.compile(r"Failed to load .*torchao[/\\]_C\w*\.\S*\.so: "),
    "torch.utils._pytree": re.compile(r"<enum '\w+'> is an Enum subclass and is now natively "
                                      r"supported by torch\.compile"),
    "executorch.exir.pass_manager": re.compile(r"PassManager is deprecated\. Please use "
                                               r"ExportedProgramPassManager instead\."),
}

WARNINGS = [(r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning)]
"""(message pattern, category) of the Python warnings dropped."""


class _Drop(logging.Filter):
    """Drops the records of one logger whose message matches ``pattern``."""

    def __init__(self, pattern: re.Pattern):
        super().__init__()
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.match(record.getMessage())


def silence_noise() -> None:
    """Install the filters (once; the loggers need not exist yet, nor their libraries be
    imported)."""
    for name, pattern in NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Drop) for f in logger.filters):
            logger.addFilter(_Drop(pattern))
    for message, category in WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
