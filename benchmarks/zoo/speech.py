"""Models from a public speech library (SpeechBrain), as a user brings them: random weights,
a small input (40 filterbank features x 100 frames, 1 s of speech), a few calibration
samples. Shared by ``tests/test_speech_library.py`` (a representative few, in CI) and
``benchmarks/model_library.py --set speech`` (the whole list). Speaker embeddings (TDNN, ECAPA with
attentive statistics pooling, ResNet), conv-recurrent ASR encoders, ContextNet, a conformer.

SpeechBrain imports torchaudio, whose compiled extension on PyPI is built against a CUDA
torch and does not load beside this CPU torch build; the models here use none of it, so
``import_speechbrain`` imports torchaudio as a build without its extension (the case
torchaudio itself handles: no library file found)."""

from __future__ import annotations

import functools
import importlib.util
import pathlib
import warnings

import torch

from .public import measure, with_samples

FEATURES, FRAMES = 40, 100      # filterbank features x frames (10 ms hop: 1 s)
TARGETS = ["imxrt700", "corstone-300", "corstone-320"]

_SB = None


def import_torchaudio():
    """torchaudio, initialised without its extension (as a build without the library file);
    a package that imports torchaudio (speechbrain, torchcrepe) can be imported after it."""
    spec = importlib.util.find_spec("torchaudio")
    lib_dir = pathlib.Path(spec.submodule_search_locations[0]) / "lib"
    glob = pathlib.Path.glob

    def without_extension(self, pattern, *args, **kwargs):
        return iter(()) if self == lib_dir else glob(self, pattern, *args, **kwargs)

    pathlib.Path.glob = without_extension
    try:
        import torchaudio
    finally:
        pathlib.Path.glob = glob
    return torchaudio


def import_speechbrain():
    """speechbrain, imported so that torchaudio's unloadable extension does not stop it."""
    global _SB
    if _SB is None:
        import_torchaudio()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import speechbrain
        _SB = speechbrain
    return _SB


class Embedding(torch.nn.Module):
    """A speaker-embedding network's output as one (batch, dims) tensor."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x).flatten(1)


def _ecapa():
    from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN
    return Embedding(ECAPA_TDNN(FEATURES, channels=[64, 64, 64, 64, 192], lin_neurons=64,
                                attention_channels=32, se_channels=32, res2net_scale=4))


def _xvector():
    from speechbrain.lobes.models.Xvector import Xvector
    return Embedding(Xvector(in_channels=FEATURES, tdnn_channels=[64, 64, 64, 64, 192],
                             lin_neurons=64))


def _resnet():
    from speechbrain.lobes.models.ResNet import ResNet
    return Embedding(ResNet(input_size=FEATURES, channels=[16, 16, 32, 32],
                            block_sizes=[1, 1, 1, 1], lin_neurons=64))


def _crdnn(rnn: str):
    import speechbrain.nnet.RNN as sb_rnn
    from speechbrain.lobes.models.CRDNN import CRDNN
    return CRDNN(input_shape=[1, FRAMES, FEATURES], cnn_channels=[16, 32], dropout=0.0,
                 rnn_class=getattr(sb_rnn, rnn), rnn_layers=2, rnn_neurons=64,
                 rnn_bidirectional=False, dnn_blocks=1, dnn_neurons=64,
                 inter_layer_pooling_size=[2, 2])


def _contextnet():
    from speechbrain.lobes.models.ContextNet import ContextNet
    return ContextNet(input_shape=(1, FRAMES, FEATURES), out_channels=64,
                      conv_channels=[32, 32, 64], num_blocks=3, num_layers=2,
                      strides=[1, 2, 1], dropout=0.0)


def _vgg_lstm():
    import speechbrain.nnet.RNN as sb_rnn
    from speechbrain.lobes.models.ESPnetVGG import ESPnetVGG
    return ESPnetVGG(input_shape=[1, FRAMES, FEATURES], cnn_channels=[16, 32],
                     rnn_class=sb_rnn.LSTM, rnn_layers=1, rnn_neurons=64,
                     rnn_bidirectional=False, projection_neurons=64, dropout=0.0)


def _conformer(layers: int = 2, width: int = 64):
    from speechbrain.lobes.models.transformer.Conformer import ConformerEncoder

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(FEATURES, width)
            self.enc = ConformerEncoder(num_layers=layers, d_model=width, d_ffn=2 * width,
                                        nhead=4, kernel_size=15, dropout=0.0,
                                        attention_type="regularMHA")

        def forward(self, x):
            return self.enc(self.proj(x))[0]

    return Encoder()


# name -> factory of the model; every model takes (1, FRAMES, FEATURES) features
MODELS = {
    "xvector": _xvector,
    "ecapa_tdnn": _ecapa,
    "resnet_tdnn": _resnet,
    "crdnn_lstm": lambda: _crdnn("LSTM"),
    "crdnn_gru": lambda: _crdnn("GRU"),
    "vgg_lstm": _vgg_lstm,
    "contextnet": _contextnet,
    "conformer": _conformer,
    "conformer_1x32": lambda: _conformer(1, 32),
}

# name -> the targets it runs wholly on the NPU, in one partition: the representative few
# the tests compile (tests/test_speech_library.py) on every target of TARGETS. The
# conformer (attention, GLU gate, depthwise temporal conv, LayerNorm, swish) runs wholly on
# the NPU everywhere; the speaker ResNet keeps a reshape and a copy of its statistics
# pooling on the CPU (benchmarks/model_library.py --set speech lists what stays and why).
TEST_SET: dict[str, set[str]] = {
    "conformer_1x32": set(TARGETS),
    "resnet_tdnn": set(),       # 2-D residual convs with squeeze-excite, statistics pooling
}


def build(name: str, seed: int = 0):
    """(model, example inputs, calibration samples, held-out test inputs) for ``name``."""
    import_speechbrain()
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = MODELS[name]()
    return with_samples(model, (1, FRAMES, FEATURES), seed)


@functools.lru_cache(maxsize=None)
def compiled(name: str, target: str):
    """(model, compiled program, held-out test inputs, ``measure``'s figures) for ``name`` on
    ``target``, compiled once per test process (see ``public.compiled``)."""
    import mcu_npu

    model, example, calibration, tests = build(name)
    prog = mcu_npu.compile(model, example, target=target, calibration=calibration)
    return model, prog, tests, measure(prog, model, tests)


def same_compile(name: str, target: str):
    """The pytest mark that sends every test using ``compiled(name, target)`` to one worker."""
    import pytest

    return pytest.mark.xdist_group(f"speech_library-{name}-{target}")
