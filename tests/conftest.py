import os
import warnings

import pytest
import torch

warnings.filterwarnings("ignore", category=FutureWarning)
torch.manual_seed(0)
os.environ.setdefault("PYTHONHASHSEED", "0")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
