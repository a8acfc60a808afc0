"""Host execution of .pte programs: ExecuTorch kernels through torch ops, NPU delegates
through emulators (LiteRT over the partition's TFLite graph)."""

from .delegates import get_emulator, register_emulator
from .npu_emulator import run_payload
from .pte import InputSpec, Program, load

load_program = load
register_emulator("NeutronBackend", run_payload)
register_emulator("EthosUBackend", run_payload)

__all__ = ["Program", "InputSpec", "load", "load_program", "register_emulator", "get_emulator"]
