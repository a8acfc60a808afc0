"""Reference models: the MLPerf Tiny networks used by benchmarks and model-level tests."""

from .mlperf_tiny import MODELS, ds_cnn, fc_autoencoder, mobilenet_v1_025, resnet8

__all__ = ["MODELS", "ds_cnn", "mobilenet_v1_025", "resnet8", "fc_autoencoder"]
