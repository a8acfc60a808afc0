import os
import warnings

# pytest-xdist runs one worker per core: a worker's own intra-op threads would only contend
# with the other workers (an OpenMP region waits for threads the OS has descheduled, which
# made small ops take milliseconds). Results do not depend on the thread count.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
if _WORKERS:
    _THREADS = str(max(1, (os.cpu_count() or 1) // _WORKERS))
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = _THREADS

import pytest  # noqa: E402
import torch  # noqa: E402

if _WORKERS:
    torch.set_num_threads(int(_THREADS))

warnings.filterwarnings("ignore", category=FutureWarning)
torch.manual_seed(0)
os.environ.setdefault("PYTHONHASHSEED", "0")


@pytest.fixture(autouse=True, scope="session")
def _every_program_is_lean():
    """Every program a test compiles is checked to hold only what the board reads
    (``helpers.assert_device_program_is_lean``): the compile returning it fails otherwise."""
    from mcu_npu import api

    from helpers import assert_device_program_is_lean

    original = api._compile

    def checked(*args, **kwargs):
        prog = original(*args, **kwargs)
        assert_device_program_is_lean(prog.buffer)
        return prog

    api._compile = checked
    yield
    api._compile = original


@pytest.fixture(autouse=True)
def _model_runs_in_both_runtimes(request):
    """In model-level tests (marked ``slow``) every host run of a program also runs in
    ExecuTorch's own runtime (``run(runtime="executorch")``), and the outputs must be equal
    bit for bit: a difference is a bug in one of the two runtimes."""
    if request.node.get_closest_marker("slow") is None:
        yield
        return
    from mcu_npu import api

    from helpers import assert_same_outputs

    original = api.LoadedProgram.run

    def both(self, *inputs, runtime="host", **kwargs):
        outputs = original(self, *inputs, runtime=runtime, **kwargs)
        if runtime == "host" and not kwargs:
            assert_same_outputs(outputs, original(self, *inputs, runtime="executorch"),
                                "the host runtime", "ExecuTorch's runtime")
        return outputs

    api.LoadedProgram.run = both
    yield
    api.LoadedProgram.run = original


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
