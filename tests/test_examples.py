"""The example model files users compile with ``mcu-npu compile examples/<file>.py:factory``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import convert_module
from mcu_npu.runtime.litert import interpreter, run_model

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str):
    """Import ``examples/<name>.py`` the way the CLI does (by path, not as a package)."""
    module_name = f"example_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[module_name] = module
    return sys.modules[module_name]


@pytest.fixture(scope="module")
def digits():
    return load_example("digits")


def test_digits_split_is_fixed_and_disjoint(digits):
    x_train, y_train, x_test, y_test = digits.split()
    assert x_train.shape[1:] == x_test.shape[1:] == (1, 8, 8)
    assert len(x_train) + len(x_test) == 1797 and len(y_test) == len(x_test)
    assert 0.0 <= float(x_train.min()) and float(x_train.max()) <= 1.0
    images, labels = digits.held_out()
    assert torch.equal(images, x_test) and torch.equal(labels, y_test)
    # calibration samples come from the training split
    train = {x.numpy().tobytes() for x in x_train}
    calibration = digits.calibration()
    assert len(calibration) == 32
    assert all(len(s) == 1 and s[0].shape == (1, 1, 8, 8) for s in calibration)
    assert all(s[0][0].numpy().tobytes() in train for s in calibration)


def test_digits_float_model_reaches_97_percent(digits):
    model, example_inputs = digits.factory()
    assert not model.training
    assert model(*example_inputs).shape == (1, 10)
    assert digits.accuracy(model) >= 0.97


def test_digits_quantized_model_keeps_its_accuracy(digits):
    model, example_inputs = digits.factory()
    _, tflite, _ = convert_module(model, example_inputs, digits.calibration())
    images, labels = digits.held_out()
    interp = interpreter(tflite.buffer)
    predicted = np.array([run_model(tflite, (images[i:i + 1],), interp)[0].argmax()
                          for i in range(len(images))])
    assert float(np.mean(predicted == labels.numpy())) >= 0.96


def test_kws_factory_runs_on_its_example_inputs():
    kws = load_example("kws_cnn")
    model, example_inputs = kws.factory()
    assert not model.training
    assert example_inputs[0].shape == (1, 1, 49, 10)
    with torch.no_grad():
        out = model(*example_inputs)
    assert out.shape == (1, 12) and torch.isfinite(out).all()
    again, _ = kws.factory()
    with torch.no_grad():
        assert torch.equal(again(*example_inputs), out)  # deterministic initialization
