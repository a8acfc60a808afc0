"""Every NPU kind has its family package (``npu.families``), and what differs by family is
read from it."""

import struct

from mcu_npu.npu.families import PACKAGES, family_module
from mcu_npu.npu.neutron import payload as nxp
from mcu_npu.targets import NpuKind


def test_every_npu_kind_has_a_family_package_with_its_runtime_record():
    assert set(PACKAGES) == set(NpuKind)
    for kind in NpuKind:
        record = family_module(kind, "runtime").runtime_record([])
        assert record["runtime"] == kind.device_backend


def test_the_neutron_record_lists_the_payload_versions_it_is_given():
    def payload(version: int) -> bytes:
        count = {0: 13, 1: 15}[version]  # header words of the version
        words = [0] * count
        words[0], words[6], words[7] = nxp.MAGIC, count * 4, 32
        words[count - 2] = words[count - 1] = 1  # one input, one output
        return nxp.compose(nxp.NeutronPayload(
            num_input_args=1, input_formats=(0,), output_formats=(0,), input_map=(0,),
            output_map=(0,), version=version, microcode=struct.pack(f"<{count}I", *words),
            weights=bytes(32), kernels=b""))

    record = family_module(NpuKind.NEUTRON, "runtime").runtime_record(
        [payload(1), payload(0), payload(1)])
    assert record["neutron_payload_versions"] == [0, 1]
    assert f"{nxp.MAGIC:#010x}" in record["delegate_payload"]
