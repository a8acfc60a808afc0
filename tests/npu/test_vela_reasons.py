"""Reading Vela's reasons from the console output of its core, Regor.

The texts are Regor 5.2 output as printed: a warning naming the operator, its ``Reason:`` line
and the rule it broke; and, for checks that name no operator (a tensor quantization scale Regor
cannot represent), the rule alone.
"""

from __future__ import annotations

from mcu_npu.npu.ethos_u.vela_support import reasons

SCALE = "Quantization scale of any tensor must be positive."

# Captured from a U55 partition: four operators fail the scale check (no warning header), then
# a stride 4 depthwise convolution is rejected with a warning, then two more fail the scale check.
CAPTURED = (f"{SCALE}\n" * 4 + "\n"
            "Warning (supported operators) operator: DEPTHWISE_CONV_2D, "
            "ofm: 'aten_convolution_default_1'\n"
            "Reason: Unsupported kernel stride: 4, 4\n"
            "Kernel stride must be in the range (1,3).\n"
            f"{SCALE}\n{SCALE}\n")


def test_headerless_lines_are_the_partitions_reason_not_the_previous_operators():
    named, unnamed = reasons(CAPTURED)
    assert named == {"aten_convolution_default_1": "Unsupported kernel stride: 4, 4; "
                                                   "Kernel stride must be in the range (1,3)."}
    assert unnamed == [SCALE]


def test_only_headerless_lines():
    assert reasons(f"{SCALE}\n" * 123) == ({}, [SCALE])


def test_rule_of_several_lines_and_operator_without_a_rule():
    text = ("\nWarning (supported operators) operator: AVERAGE_POOL_2D, ofm: 'pool'\n"
            "Reason: kernel width: 9 out of range\n"
            "Kernel constraints:\n"
            "  - IF padding=VALID:\n"
            "    - Kernel product must be less than or equal to 256*256\n"
            f"{SCALE}\n"
            "\nWarning (supported operators) operator: GATHER, ofm: 'gather'\n"
            "Reason: Unsupported opType\n"
            f"{SCALE}\n"
            "Warning: unused option in the configuration file\n")
    named, unnamed = reasons(text)
    assert named == {
        "pool": "kernel width: 9 out of range; Kernel constraints:; - IF padding=VALID:; "
                "- Kernel product must be less than or equal to 256*256",
        "gather": "Unsupported opType"}
    assert unnamed == [SCALE]


def test_no_headerless_lines():
    text = ("\nWarning (supported operators) operator: DEPTHWISE_CONV_2D, ofm: 'dw'\n"
            "Reason: Unsupported kernel stride: 4, 4\n"
            "Kernel stride must be in the range (1,3).\n")
    assert reasons(text) == ({"dw": "Unsupported kernel stride: 4, 4; Kernel stride must be "
                                    "in the range (1,3)."}, [])
