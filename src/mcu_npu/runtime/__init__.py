"""Host execution of .pte programs: ExecuTorch kernels through torch ops, NPU delegates
through emulators (LiteRT over the partition's TFLite graph), one per NPU family's device
runtime (``register_emulator``; the built-in families' below)."""

from ..npu import ethos_u, neutron
from .delegates import get_emulator, register_emulator
from .npu_emulator import run_copying, run_ethos_u, run_neutron
from .pte import InputSpec, Program, load

load_program = load
for _family, _run in ((neutron.FAMILY, run_neutron), (ethos_u.FAMILY, run_ethos_u)):
    register_emulator(_family.backend_id, _run, _family.input_count)

__all__ = ["Program", "InputSpec", "load", "load_program", "register_emulator", "get_emulator",
           "run_copying"]
