"""The PT2E driver: prepare, calibrate (in float64), check and convert a model with a quantizer
(``npu_quantizer.NpuQuantizer`` by default), post-training or aware-training."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable

import torch
from torch.fx import GraphModule
from torchao.quantization.pt2e.quantizer import Quantizer

from ..progress import counted
from ..upstream.patches import (conv_bn_rewrites_where_they_match, graph_code_on_first_use,
                                observer_names_in_linear_time, pattern_graphs_traced_once)
from .calibration.gathered import gathered_min_max
from .calibration.records import CALIBRATION_KEY, calibration_records
from .calibration.whole_model import CHECK_KEY, check
from .calibration.bias_correction import CORRECTED_KEY, correct, float_means_recorded
from .exact import to_float32, to_float64
from .pinned_inputs import pin_input_observers
from .npu_quantizer import NpuQuantizer
from .state_encoding import tie_state_observers


def quantize(
    model: torch.nn.Module | GraphModule,
    example_inputs: tuple,
    calibration: Iterable[tuple] | None = None,
    quantizer: Quantizer | None = None,
) -> GraphModule:
    """Export (if needed), prepare, calibrate and convert ``model``; returns the PT2E module.

    The result is the quantized reference: running it in PyTorch gives the numbers an int8
    deployment must reproduce. Its ``meta[CALIBRATION_KEY]`` holds how each activation's
    range was chosen (``calibration.records.calibration_records``), its
    ``meta[CORRECTED_KEY]`` the bias correction's verdict where the quantizer asks for one
    (``bias_correction``). torchao runs within
    ``torchao_as_quantize_runs_it``: its QAT conv + BatchNorm rewrites only where they can
    match, on patterns traced once per process, observers named in linear time and graph
    code generated when it is used.
    """
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    quantizer = quantizer or NpuQuantizer()
    if not isinstance(model, GraphModule):
        model = torch.export.export(model.eval(), tuple(example_inputs)).module(
            check_guards=False
        )
    with torchao_as_quantize_runs_it():
        prepared = prepare_pt2e(model, quantizer)
        samples = list(calibration) if calibration is not None else [tuple(example_inputs)]
        correcting = getattr(quantizer, "bias_correction", False)
        with float_means_recorded(prepared) if correcting else contextlib.nullcontext({}) \
                as float_means:
            outputs = calibrate(prepared, samples)
        verdict = check_auto(prepared, samples, outputs)
        before_db = verdict.pop("kept_sqnr_db") if verdict is not None else None
        corrected = _bias_correction(prepared, samples, outputs, before_db, float_means) \
            if correcting else None
        reference, records = _convert(prepared)
    if corrected is not None:
        reference.meta[CORRECTED_KEY] = corrected
    reference.meta[CALIBRATION_KEY] = records
    if verdict is not None:
        reference.meta[CHECK_KEY] = verdict
    return reference


def _bias_correction(prepared: GraphModule, samples: list, outputs: list,
                     before_db: float | None, float_means: dict | None = None) -> dict | None:
    """``calibration.bias_correction.correct`` on every layer of ``prepared`` (``before_db``:
    the simulated SQNR auto's check kept, if it ran; ``float_means``: the layers' means the
    calibration recorded); None where the graph cannot compute in float64 (the biases are
    left as they were)."""
    try:
        return correct(prepared, samples, outputs, lambda: _computing_in_float64(prepared),
                       before_db, float_means)
    except (RuntimeError, TypeError, AssertionError):
        return None


def _convert(prepared: GraphModule) -> tuple[GraphModule, dict]:
    """The converted reference and the calibration records read before the observers go."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    records = calibration_records(prepared)
    return convert_pt2e(prepared), records


def calibrate(prepared: GraphModule, samples: Iterable[tuple]) -> list:
    """Run the calibration samples through the observers of ``prepared``, in float64; the
    float model's outputs on them are returned (auto's whole-model check reads them).

    In float32 the observed ranges hang on the order in which the host's kernels sum (oneDNN
    and ATen pick it by CPU), so scales, biases and the whole int8 program would differ
    between machines by an ulp here and there, and the int8 results downstream by whole
    steps. The float64 activations rounded to float32 (the observers go back to float32
    before ``convert_pt2e``) are the same on every host. A graph that cannot run in float64
    (an op with a hard-coded float32 constant) is calibrated in float32. The MinMax
    observers gather the runs (``calibration.gathered``): the ranges are theirs, found in
    fewer ops.
    """
    samples = list(samples)
    try:
        with torch.no_grad():
            begin_float64_calibration(prepared)
            with gathered_min_max(prepared):
                for sample in counted(samples, "calibrating"):
                    prepared(*sample)
            outputs = [run[1] for run in calibration_runs(prepared, take=True)]
    except (RuntimeError, TypeError, AssertionError):
        end_float64_calibration(prepared)
        calibration_runs(prepared, take=True)
        _reset_observers(prepared)
        with torch.no_grad(), gathered_min_max(prepared):
            outputs = [prepared(*sample) for sample in samples]
    else:
        end_float64_calibration(prepared)
    pin_input_observers(prepared)  # a declared integer input keeps the sensor's whole range
    tie_state_observers(prepared)  # a state read and written in one encoding
    return outputs


_HOOK = "_mcu_npu_float64_hooks"
_RUNS = "_mcu_npu_calibration_runs"


def begin_float64_calibration(prepared: GraphModule) -> GraphModule:
    """``prepared`` (a ``prepare_pt2e`` result) computing in float64: parameters, buffers
    and observers in float64, float32 inputs cast on entry; each run's inputs and float
    outputs are kept (``calibration_runs``). A post-prepare pass for ExecuTorch's
    ``QuantizationRecipe``; ``end_float64_calibration`` undoes it."""
    _graph_in(prepared, torch.float64)
    if getattr(prepared, _HOOK, None) is None:
        runs = calibration_runs(prepared)

        def cast(module, args):
            runs.append([_detached(args)])
            return tuple(_as_float64(x) for x in args)

        handles = (prepared.register_forward_pre_hook(cast),
                   prepared.register_forward_hook(
                       lambda module, args, out: runs[-1].append(_detached(out))))
        object.__setattr__(prepared, _HOOK, handles)
    return prepared


def calibration_runs(prepared: GraphModule, *, take: bool = False) -> list:
    """[inputs, float outputs] of each calibration run of ``prepared`` in float64;
    ``take``: and forget them."""
    if not hasattr(prepared, _RUNS):
        object.__setattr__(prepared, _RUNS, [])
    runs = getattr(prepared, _RUNS)
    if take:
        object.__delattr__(prepared, _RUNS)
    return runs


def _detached(value):
    return torch.fx.node.map_aggregate(
        value, lambda t: t.detach() if isinstance(t, torch.Tensor) else t)


def end_float64_calibration(prepared: GraphModule) -> GraphModule:
    """Back to float32 after ``begin_float64_calibration`` (a pre-convert pass)."""
    for handle in getattr(prepared, _HOOK, None) or ():
        handle.remove()
    object.__setattr__(prepared, _HOOK, None)
    _graph_in(prepared, torch.float32)
    return prepared


def torchao_as_quantize_runs_it() -> contextlib.ExitStack:
    """The upstream patches ``quantize`` and ``quantize_qat`` run torchao's prepare and
    convert within, entered on an ``ExitStack``."""
    with contextlib.ExitStack() as stack:
        for patch in (conv_bn_rewrites_where_they_match, pattern_graphs_traced_once,
                      observer_names_in_linear_time, graph_code_on_first_use):
            stack.enter_context(patch())
        return stack.pop_all()


class RecipePatches:
    """For ExecuTorch's ``QuantizationRecipe``: ``begin`` (its pre-prepare pass) enters the
    patches ``quantize`` runs torchao within (``torchao_as_quantize_runs_it``), ``end`` (its
    post-convert pass) leaves them, so a recipe's prepare and convert run as fast as
    ``compile``'s. A QAT recipe's ``train_fn`` runs between the two; the patches give it the
    graphs torchao gives. A stage that raises in between leaves them entered until the next
    ``begin`` or ``end``: they change how fast torchao runs, not what it gives."""

    def __init__(self):
        self._entered: contextlib.ExitStack | None = None

    def begin(self, model: GraphModule) -> GraphModule:
        self.end(model)
        self._entered = torchao_as_quantize_runs_it()
        return model

    def end(self, model: GraphModule) -> GraphModule:
        if self._entered is not None:
            self._entered.close()
            self._entered = None
        return model


def whole_model_check(prepared: GraphModule) -> GraphModule:
    """A pre-convert pass (after ``end_float64_calibration``) for ExecuTorch's
    ``QuantizationRecipe``: auto's whole-model check on the calibration runs, so a recipe
    converts what ``quantize`` converts."""
    runs = [run for run in calibration_runs(prepared, take=True) if len(run) == 2]
    check_auto(prepared, [r[0] for r in runs], [r[1] for r in runs])
    return prepared


def check_auto(prepared: GraphModule, samples: list, outputs: list) -> dict | None:
    """``calibration.whole_model.check`` on ``prepared``; None where there is nothing to
    check, or the graph cannot compute in float64 (auto's ranges stand)."""
    try:
        return check(prepared, samples, outputs, lambda: _computing_in_float64(prepared))
    except (RuntimeError, TypeError, AssertionError):
        return None


@contextlib.contextmanager
def _computing_in_float64(prepared: GraphModule):
    _graph_in(prepared, torch.float64)
    try:
        yield
    finally:
        _graph_in(prepared, torch.float32)


def _graph_in(prepared: GraphModule, dtype: torch.dtype) -> None:
    """``prepared``'s parameters, buffers, observers and the tensors its graph makes in
    ``dtype`` (float64 or back to float32)."""
    if dtype == torch.float64:
        to_float64(prepared)
        _retype_tensors_made(prepared, torch.float32, torch.float64)
    else:
        _retype_tensors_made(prepared, torch.float64, torch.float32)
        to_float32(prepared)


_RETYPED = "mcu_npu_float64_dtype"


def _retype_tensors_made(prepared: GraphModule, old: torch.dtype, new: torch.dtype) -> None:
    """Tensors the graph makes itself (``zeros(..., dtype=float32)`` for a recurrent
    layer's initial state, casts) in ``new`` instead of ``old``, so a float64 calibration
    does not meet a float32 operand; marked so the way back changes exactly those."""
    changed = False
    for node in prepared.graph.nodes:
        if node.op != "call_function" or node.kwargs.get("dtype") != old:
            continue
        going_back = new == torch.float32
        if going_back != bool(node.meta.get(_RETYPED)):
            continue
        node.kwargs = {**node.kwargs, "dtype": new}
        node.meta[_RETYPED] = not going_back
        changed = True
    if changed:
        prepared.recompile()


def _as_float64(x):
    return x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x


def _reset_observers(prepared: GraphModule) -> None:
    """Forget what the observers saw; fixed and derived ones hold nothing to forget (and
    refuse a reset)."""
    for module in prepared.modules():
        reset = getattr(module, "reset_min_max_vals", None)
        if reset is not None:
            try:
                reset()
            except NotImplementedError:
                pass


def quantize_qat(
    model: GraphModule,
    example_inputs: tuple,
    calibration: Iterable[tuple],
    train_fn: Callable[[GraphModule], None],
    quantizer: Quantizer,
) -> GraphModule:
    """Quantization-aware training: fake-quantize, start the ranges from calibration (the PTQ
    starting point), let ``train_fn(model)`` train it, then convert to the quantized program."""
    from torchao.quantization.pt2e import move_exported_model_to_eval, move_exported_model_to_train
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_qat_pt2e

    with torchao_as_quantize_runs_it():
        prepared = prepare_qat_pt2e(model, quantizer)
        with torch.no_grad():
            for sample in calibration:
                prepared(*sample)
        move_exported_model_to_train(prepared)
    train_fn(prepared)  # the user's code runs with torchao as it is
    with torchao_as_quantize_runs_it():
        move_exported_model_to_eval(prepared)
        records = calibration_records(prepared)
        reference = convert_pt2e(prepared)
    reference.meta[CALIBRATION_KEY] = records
    return reference
