"""Host execution of .pte programs: ExecuTorch kernels through torch ops, NPU delegates
through emulators (LiteRT over the partition's TFLite graph)."""

from .delegates import get_emulator, register_emulator
from .npu_emulator import ethos_u_input_count, neutron_input_count, run_ethos_u, run_neutron
from .pte import InputSpec, Program, load

load_program = load
register_emulator("NeutronBackend", run_neutron, neutron_input_count)
register_emulator("EthosUBackend", run_ethos_u, ethos_u_input_count)

__all__ = ["Program", "InputSpec", "load", "load_program", "register_emulator", "get_emulator"]
