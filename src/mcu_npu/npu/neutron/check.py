"""What the Neutron runtime checks of a payload and the tensors a call hands it, for
``mcu-npu check``: its header, and each flagged tensor's rank and dim order
(``device.delegate_io.neutron_layout``)."""

from __future__ import annotations

from ...device.delegate_io import neutron_layout
from ...errors import InvalidProgramError
from . import payload as nxp


def payload_problems(data: bytes, inputs, outputs, target=None) -> list[str]:
    """Where the Neutron runtime would refuse this payload, or these delegate tensors (each
    (sizes, dim order, scalar type))."""
    try:
        payload = nxp.parse(data)
    except InvalidProgramError as exc:
        return [str(exc)]
    problems = []
    if payload.num_input_args != len(inputs):
        problems.append(f"the payload takes {payload.num_input_args} input arguments, the "
                        f"delegate call passes {len(inputs)}")
    for kind, tensors, formats, order in (("input", inputs, payload.input_formats,
                                           payload.input_map),
                                          ("output", outputs, payload.output_formats,
                                           payload.output_map)):
        for n, (flag, k) in enumerate(zip(formats, order)):
            if k >= len(tensors):
                problems.append(f"Neutron {kind} {n} maps to argument {k}, the call has "
                                f"{len(tensors)} {kind}s")
                continue
            sizes, dim_order, _ = tensors[k]
            try:
                neutron_layout(sizes, dim_order, flag, f"Neutron {kind} {n}")
            except InvalidProgramError as exc:
                problems.append(str(exc))
    return problems
