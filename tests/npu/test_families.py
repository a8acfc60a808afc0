"""Every NPU kind has its family (``npu.families``), and what differs by family is read from
it."""

import struct

import pytest

from mcu_npu.errors import ConfigError
from mcu_npu.npu.families import families, family, family_of_backend
from mcu_npu.npu.neutron import payload as nxp
from mcu_npu.targets import NpuKind, targets, get_target


def test_every_npu_kind_has_a_family_with_its_runtime_record():
    assert {f.kind for f in families()} >= set(NpuKind)
    for kind in NpuKind:
        found = family(kind)
        assert family(kind.value) is found and family_of_backend(found.backend_id) is found
        assert found.runtime_record([])["runtime"] == found.backend_id
    assert len({f.backend_id for f in families()}) == len(families())


def test_every_target_names_a_family_whose_compiler_it_uses():
    for name in targets():
        npu = get_target(name).npu
        assert family(npu.kind).compiler == npu.vendor_compiler, name


def test_an_unknown_kind_or_backend_has_no_family():
    with pytest.raises(ConfigError, match="no NPU family 'tpu'"):
        family("tpu")
    assert family_of_backend("XnnpackBackend") is None


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

    record = family(NpuKind.NEUTRON).runtime_record(
        [payload(1), payload(0), payload(1)])
    assert record["neutron_payload_versions"] == [0, 1]
    assert f"{nxp.MAGIC:#010x}" in record["delegate_payload"]
