"""Quantizable drop-ins for torch's recurrent modules, built from ``nn.Linear`` and observable ops.

Each has ``from_float(torch_module)`` copying sizes, options and weights.
"""

from mcu_npu.nn.gru import GRU, GRUCell
from mcu_npu.nn.lstm import LSTM, LSTMCell
from mcu_npu.nn.rnn import RNN, RNNCell

__all__ = ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNCell"]
