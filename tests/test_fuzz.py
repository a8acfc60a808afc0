"""Random small networks (``fuzz_nets.specs``) through the whole flow for every target: each
compiles or is refused on purpose, loads in ExecuTorch's runtime and runs on the host within
the numerics contract. A fixed, derandomized handful here; ``benchmarks/fuzz.py`` runs
thousands and groups the failures."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import fuzz_nets

CI_SPECS = fuzz_nets.specs(min_blocks=2, max_blocks=4)


@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(spec=fuzz_nets.specs())
def test_every_drawn_spec_is_a_deterministic_exportable_module(spec):
    model, example, calibration, tests = fuzz_nets.build(spec)
    again, example2, _, _ = fuzz_nets.build(spec)
    assert repr(model) == repr(again)
    for (k, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), k
    assert torch.equal(example[0], example2[0])
    assert len(calibration) == spec["calibration"] and len(tests) == 2
    torch.export.export(model, example)


@pytest.mark.slow
@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(spec=CI_SPECS)
def test_random_network_compiles_loads_and_runs_within_contract(spec):
    for target in fuzz_nets.TARGETS:
        fuzz_nets.check(spec, target)
