"""The NPU partitioner: tags the Edge nodes the NPU runs, keeping each quantized compute node
together with its quantize / dequantize nodes; the decision, with why every other compute
node stays on the CPU, is a ``partition.plan.Plan``. Where the NPU compiler can refuse
operators on its own (Vela), every proposed partition is converted and checked with it
(``propose.refine``), and refused nodes leave the NPU before partitioning again, so no
partition reaches the compiler that it would reject."""

from __future__ import annotations

from typing import Iterable

from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data
from torch.export import ExportedProgram
from torch.fx import Node

from ..upstream.private import EdgeOpOverload
from ..backend.delegate import backend_for
from ..backend.compile_spec import NpuCompileSpec
from ..errors import ConfigError
from ..targets import Target, get_target
from ..tflite.registry import PRESERVED_ATEN_OPS
from .placement import Placement
from .plan import PlanOptions, plan_program
from .propose import refine

TAG = "mcu_npu_"


class NpuPartitioner(Partitioner):
    """Delegates to the target's NPU what its converter, its limits and its compiler accept.

    ``operators_not_to_delegate``: op names (``"aten.convolution"`` or ``"convolution"``) or
    node names kept on the CPU; ``"*"`` keeps every op there. ``plan`` (``partition.plan``)
    is the decision for the Edge program it describes; any other program (or without a
    plan) is planned where it is given, with the placement the composed quantizer stamped on
    it. The partitioner keeps no state: ``plan_for(program)`` says what ``partition`` does.
    """

    default_target = "imxrt700"

    def __init__(
        self,
        target: str | Target | None = None,
        operators_not_to_delegate: Iterable[str] = (),
        npu_compiler: str = "auto",
        *,
        plan=None,
    ):
        if plan is not None:
            if target is not None and get_target(target) != plan.target:
                raise ConfigError(f"the plan is for {plan.target.name}, not "
                                  f"{get_target(target).name}")
            if tuple(operators_not_to_delegate) or npu_compiler != "auto":
                raise ConfigError("give operators_not_to_delegate and npu_compiler either to "
                                  "the partitioner or to its plan (PlanOptions), not both")
            target, options = plan.target, plan.options
        else:
            options = PlanOptions(tuple(operators_not_to_delegate), npu_compiler)
        self.target = get_target(target or self.default_target)
        self.options = options
        self.plan = plan
        spec = NpuCompileSpec(target=self.target.name, npu_compiler=options.npu_compiler,
                              memory=self.target.placement)
        backend = backend_for(self.target.npu.kind)  # ExecuTorch finds it by class name
        self.delegation_spec = DelegationSpec(backend.__name__, spec.to_compile_specs())

    @property
    def excluded(self) -> tuple[str, ...]:
        return self.options.operators_not_to_delegate

    @property
    def npu_compiler(self) -> str:
        return self.options.npu_compiler

    def plan_for(self, program: ExportedProgram):
        """The plan for ``program``: the given one when it describes this program, else the
        program planned now (``plan.plan_program``)."""
        if self.plan is not None and self.plan.describes(program):
            return self.plan
        return plan_program(program, self.target, self.options)

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        plan = self.plan_for(exported_program)
        tag_of = {name: f"{TAG}{k}" for k, names in enumerate(plan.members) for name in names}
        for node in exported_program.graph.nodes:
            if node.name in tag_of:
                node.meta["delegation_tag"] = tag_of[node.name]
        tags = {f"{TAG}{k}": self.delegation_spec for k in range(len(plan.members))}
        tag_constant_data(exported_program)
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)

    def refine(self, program: ExportedProgram) -> dict[str, str]:
        """The NPU compiler's refusals for ``program`` (``propose.refine``); nothing is
        kept."""
        return refine(program, self.target, self.excluded, self.npu_compiler,
                      Placement.from_program(program))

    def ops_to_not_decompose(self, ep: ExportedProgram):
        """Keep the ops of PRESERVED_ATEN_OPS whole when they are quantized: NPU candidates, and
        the Cortex-M kernels want them whole too. ExecuTorch asks again after delegation, on
        the Edge program: what is left there is the CPU's, kept whole."""

        def keep(node: Node) -> bool:
            if isinstance(node.target, EdgeOpOverload):  # after delegation
                return False
            args = [a for a in node.args if isinstance(a, Node)]
            return bool(args) and all("dequantize" in str(a.target) for a in args)

        return list(PRESERVED_ATEN_OPS), keep


class NeutronPartitioner(NpuPartitioner):
    """The partitioner for NXP eIQ Neutron targets (default: ``imxrt700``)."""

    default_target = "imxrt700"


class EthosUPartitioner(NpuPartitioner):
    """The partitioner for Arm Ethos-U targets (default: ``corstone-300``)."""

    default_target = "corstone-300"
