"""The import structure of ``mcu_npu``: packages depend on each other one way, and the host
runtime loads no compiler.

Every module under src/mcu_npu is read with ``ast``; its imports of ``mcu_npu`` modules, at
module level and inside functions alike (a function-local import is a dependency all the
same), become edges between packages. A package is a direct subpackage of ``mcu_npu``
(``mcu_npu.partition``, ``mcu_npu.tflite``, ...) or a top-level module (``mcu_npu.api``,
``mcu_npu.backend``, ...); ``mcu_npu`` itself is its ``__init__``. Between packages, imports
within one package are not edges; between modules, every import is (a package's ``__init__``
is the module named after the package), so no cycle hides inside a package either.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import mcu_npu

SRC = Path(mcu_npu.__file__).resolve().parent
ROOT = "mcu_npu"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported mcu_npu module
    line: int
    module_level: bool  # executed when ``source`` is imported (not in a function or TYPE_CHECKING)

    def __str__(self) -> str:
        where = "" if self.module_level else " (inside a function)"
        return f"{self.source}:{self.line} imports {self.target}{where}"


def _known(name: str) -> str:
    """The longest prefix of dotted ``name`` that is a module of the source tree."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(module: str) -> list[Import]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def add(target: str, node: ast.stmt, module_level: bool) -> None:
        if target == ROOT or target.startswith(ROOT + "."):
            found.append(Import(module, _known(target), node.lineno, module_level))

    def visit(node: ast.AST, module_level: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node, module_level)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = ".".join(base[: len(base) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in MODULES else base, node, module_level)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            module_level = False
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, False)
            for child in node.orelse:
                visit(child, module_level)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, module_level)

    visit(ast.parse(path.read_text(), str(path)), True)
    return list(dict.fromkeys(found))  # ``from x import a, b``: one import


IMPORTS: dict[str, list[Import]] = {m: imports_of(m) for m in MODULES}


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def package_graph() -> dict[str, dict[str, list[Import]]]:
    """package -> imported package -> the imports that make the edge."""
    graph: dict[str, dict[str, list[Import]]] = {package_of(m): {} for m in MODULES}
    for module, imports in IMPORTS.items():
        for imp in imports:
            a, b = package_of(module), package_of(imp.target)
            if a != b:
                graph[a].setdefault(b, []).append(imp)
    return graph


def strongly_connected(graph: dict[str, dict]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one member."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return components


def shortest_cycle(graph: dict[str, dict], start: str, members: set[str]) -> list[str]:
    """A shortest cycle through ``start`` inside ``members`` (breadth-first)."""
    came_from: dict[str, str] = {}
    todo = deque([start])
    while todo:
        v = todo.popleft()
        for w in sorted(graph[v]):
            if w not in members:
                continue
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if w not in came_from:
                came_from[w] = v
                todo.append(w)
    raise AssertionError(f"{start} is on no cycle")


def module_graph() -> dict[str, dict[str, list[Import]]]:
    """module -> imported module -> the imports that make the edge."""
    graph: dict[str, dict[str, list[Import]]] = {m: {} for m in MODULES}
    for module, imports in IMPORTS.items():
        for imp in imports:
            if imp.target != module:
                graph[module].setdefault(imp.target, []).append(imp)
    return graph


def describe_cycles(graph: dict[str, dict[str, list[Import]]], what: str = "packages") -> str:
    lines = []
    for component in strongly_connected(graph):
        members = set(component)
        lines.append(f"{what} importing each other: {', '.join(component)}")
        for start in component:
            cycle = shortest_cycle(graph, start, members)
            if cycle[0] != min(cycle[:-1]):
                continue  # print each cycle once, from its smallest member
            lines.append("  cycle: " + " -> ".join(cycle))
            for a, b in zip(cycle, cycle[1:]):
                for imp in graph[a][b]:
                    lines.append(f"    {imp}")
    return "\n".join(lines)


def test_every_module_is_parsed():
    assert {"mcu_npu.runtime", "mcu_npu.partition", "mcu_npu.backend"} <= \
        {package_of(m) for m in MODULES}
    assert any(imp.target == "mcu_npu.errors" for imps in IMPORTS.values() for imp in imps)


def test_no_import_cycles_between_packages():
    report = describe_cycles(package_graph())
    print(report)
    assert not report, "\n" + report


def test_no_import_cycles_between_modules():
    """Inside a package too, no module imports one that (through others) imports it back:
    each module reads only what is below it, so it can be read, and loaded, on its own."""
    report = describe_cycles(module_graph(), "modules")
    print(report)
    assert not report, "\n" + report


def test_the_module_walk_finds_a_cycle_inside_a_package():
    """A cycle between two modules of one package is found, with both imports named."""
    a, b = "mcu_npu.partition.plan", "mcu_npu.partition.placement"
    graph = module_graph()
    graph[b] = {**graph[b], a: [Import(b, a, 1, False)]}
    report = describe_cycles(graph, "modules")
    assert f"cycle: {b} -> {a} -> {b}" in report and f"{b}:1 imports {a}" in report


# Compile-time code the host runtime must not load: what converts, quantizes, partitions,
# rewrites or compiles, and the compile flow around it. ``mcu_npu.npu`` holds the NPU
# compiler adapters (compile time) and the payload formats the runtime reads; importing one
# of those runs the package's ``__init__`` (and its family package's), which therefore must
# load no compiler.
# ``mcu_npu.upstream`` holds patches the runtime needs too and ``to_edge`` done in place.
COMPILE_TIME = {"mcu_npu.api", "mcu_npu.backend", "mcu_npu.cli", "mcu_npu.flow",
                "mcu_npu.partition", "mcu_npu.passes", "mcu_npu.quantization", "mcu_npu.recipes",
                "mcu_npu.tflite", "mcu_npu.flow.edge_dialect",
                "mcu_npu.flow.decompose_in_place"}
PAYLOAD_FORMATS = {"mcu_npu.npu", "mcu_npu.npu.family", "mcu_npu.npu.families",
                   *(f"mcu_npu.npu.{family}{module}" for family in ("ethos_u", "neutron")
                     for module in ("", ".payload", ".io", ".check", ".runtime", ".sdk"))}
"""The NPU families (``npu.family``, ``npu.families`` and each family package with what its
``FAMILY`` reads: payload format, I/O rules, payload checks, runtime record), which the host
runtime reads; none of them loads a compiler."""
RUNTIME_MODULES = sorted(m for m in MODULES if package_of(m) == "mcu_npu.runtime")


def is_compile_time(module: str) -> bool:
    if package_of(module) == "mcu_npu.npu":
        return module not in PAYLOAD_FORMATS
    return package_of(module) in COMPILE_TIME or module in COMPILE_TIME


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def runtime_closure() -> dict[str, tuple[str, ...]]:
    """Every mcu_npu module that importing or running ``mcu_npu.runtime`` loads, with the
    chain of imports that loads it: all imports of the runtime's own modules (in functions
    too), the module-level imports of what they load, and the packages above each."""
    chains: dict[str, tuple[str, ...]] = {}
    todo = deque((m, (m,)) for m in RUNTIME_MODULES)
    while todo:
        module, chain = todo.popleft()
        if module in chains:
            continue
        chains[module] = chain
        in_runtime = package_of(module) == "mcu_npu.runtime"
        for parent in _parents(module):
            todo.append((parent, (*chain, f"{parent} (package of {module})")))
        for imp in IMPORTS[module]:
            if imp.module_level or in_runtime:
                todo.append((imp.target, (*chain, f"{imp.target} (line {imp.line})")))
    return chains


def test_host_runtime_loads_no_compiler():
    loaded = runtime_closure()
    wrong = sorted(m for m in loaded if is_compile_time(m))
    report = "\n".join(f"{m}: " + " -> ".join(loaded[m]) for m in wrong)
    print(report)
    assert not wrong, "the host runtime loads compile-time modules:\n" + report


def test_runtime_closure_follows_imports():
    """The walk sees through packages: the runtime reads payload formats and partitions."""
    loaded = runtime_closure()
    assert {"mcu_npu.device.payload", "mcu_npu.device.tflite_model",
            "mcu_npu.device.delegate_io", "mcu_npu.npu",
            "mcu_npu.npu.neutron.payload", "mcu_npu.npu.ethos_u.payload"} <= set(loaded)
    assert is_compile_time("mcu_npu.npu.ethos_u.vela") and \
        is_compile_time("mcu_npu.npu.neutron.compiler") and \
        is_compile_time("mcu_npu.tflite.converter")
    assert not is_compile_time("mcu_npu.npu.ethos_u.payload")


def test_importing_the_runtime_loads_no_compiler():
    """What Python really loads (imports made by name included) agrees with the walk."""
    script = (f"import sys\nfor m in {RUNTIME_MODULES!r}:\n    __import__(m)\n"
              "print('\\n'.join(m for m in sys.modules if m.startswith('mcu_npu')))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.split()
    assert set(RUNTIME_MODULES) <= set(out)
    assert not [m for m in out if is_compile_time(m)], out
