"""Reference models for benchmarks and model-level tests: the MLPerf Tiny networks and
networks of MobileNetV3-, EfficientNet- and TransformerEncoder-style blocks; biosignal and
speech model shapes (``signal``)."""

from .blocks import (BLOCK_MODELS, efficientnet_style, mobilenet_v3_style,
                     transformer_encoder_style)
from .mlperf_tiny import MODELS, ds_cnn, fc_autoencoder, mobilenet_v1_025, resnet8
from .signal import SIGNAL_MODELS

__all__ = ["MODELS", "ds_cnn", "mobilenet_v1_025", "resnet8", "fc_autoencoder",
           "BLOCK_MODELS", "mobilenet_v3_style", "efficientnet_style", "transformer_encoder_style",
           "SIGNAL_MODELS"]
