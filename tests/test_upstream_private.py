"""Every private name of ExecuTorch, torch and torchao that mcu-npu reads is in
``mcu_npu.upstream.private`` and still there, and no module outside ``upstream/`` reaches one
by itself: an upgrade that moves a private name fails here, in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch.utils import _pytree

import mcu_npu
from mcu_npu.upstream import private

SRC = Path(mcu_npu.__file__).resolve().parent
UPSTREAM = ("executorch", "torch", "torchao")


@pytest.mark.parametrize("name", sorted(private.PRIVATE))
def test_every_private_name_resolves(name):
    found = private.resolve(name)
    assert found is not None
    assert getattr(private, name) is found  # what ``from ..upstream.private import`` gets


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        private.nothing_here  # noqa: B018


def _private_reaches(path: Path) -> list[str]:
    """``module:name`` of each private upstream module or name ``path`` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] in UPSTREAM:
            private_module = any(part.startswith("_") for part in node.module.split("."))
            found += [f"{node.module}:{a.name}" for a in node.names
                      if private_module or a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in UPSTREAM
                      and any(part.startswith("_") for part in a.name.split("."))]
    return found


def test_no_module_outside_upstream_imports_a_private_name():
    reaches = {str(p.relative_to(SRC)): r for p in sorted(SRC.rglob("*.py"))
               if p.relative_to(SRC).parts[0] != "upstream" and (r := _private_reaches(p))}
    assert reaches == {}, "import these through mcu_npu.upstream.private: " + repr(reaches)


def test_the_scan_finds_a_private_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from torch.utils import _pytree as pytree\n"
                      "from executorch.exir._serialize._program import deserialize_pte_binary\n"
                      "import torch.ao.quantization.fx._decomposed\nfrom torch import nn\n")
    assert _private_reaches(module) == [
        "torch.utils:_pytree", "executorch.exir._serialize._program:deserialize_pte_binary",
        "torch.ao.quantization.fx._decomposed"]


def test_the_calling_form_setter_makes_a_flat_module():
    gm = torch.fx.symbolic_trace(lambda x, y: (x + y, x * y))
    in_spec = _pytree.tree_flatten(((0, 1), {}))[1]
    out_spec = _pytree.tree_flatten((0, 1))[1]
    private.set_pytree_calling(gm, in_spec, out_spec)
    gm.recompile()
    a, b = torch.ones(2), torch.full((2,), 3.0)
    assert [t.tolist() for t in gm(a, b)] == [[4.0, 4.0], [3.0, 3.0]]
    copy = torch.fx.Graph()
    private.copy_calling(gm.graph, copy)
    assert copy._codegen.pytree_info.out_spec == out_spec
