"""The operator table's entries, one module per operator (family); importing this package
imports every module in it, which registers them all (see ``docs/adding_an_operator.md``):
a new operator is a new module here, with no list to update."""

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if not _module.startswith("_"):
        importlib.import_module(f"{__name__}.{_module}")
