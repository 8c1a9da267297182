"""Counts the calls Python makes into the extension ``metalrt._metalrt`` (the bench's
replayed-decode figures and the plan gates in tests/python use it).

Inside ``counting()`` every function of the extension and its submodules, and every
method and property of its classes, is replaced by a wrapper that counts the call and
forwards it; references the metalrt Python modules imported by name are replaced too.
So the count is of real calls crossing into C++, wherever they come from."""
from __future__ import annotations

import sys
import types
from contextlib import contextmanager
from typing import Dict, Iterator, List, Tuple

from metalrt import _metalrt

_DUNDERS = ("__len__", "__getitem__", "__array__", "__repr__", "__init__")


class Counter:
    def __init__(self):
        self.calls = 0
        self.names: Dict[str, int] = {}

    def wrap(self, name, fn):
        def counted(*args, **kwargs):
            self.calls += 1
            self.names[name] = self.names.get(name, 0) + 1
            return fn(*args, **kwargs)
        counted.__name__ = getattr(fn, "__name__", name)
        return counted


def _native_modules() -> List[types.ModuleType]:
    found, todo = [], [_metalrt]
    while todo:
        module = todo.pop()
        found.append(module)
        todo.extend(v for v in vars(module).values()
                    if isinstance(v, types.ModuleType) and v.__name__.startswith(_metalrt.__name__)
                    and v not in found)
    return found


@contextmanager
def counting() -> Iterator[Counter]:
    counter = Counter()
    undo: List[Tuple[object, str, object]] = []
    replaced: Dict[int, object] = {}

    def patch(owner, name, new):
        undo.append((owner, name, owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)))
        setattr(owner, name, new)

    try:
        for module in _native_modules():
            for name, value in list(vars(module).items()):
                if isinstance(value, type) and value.__module__.startswith(_metalrt.__name__):
                    for attr, member in list(vars(value).items()):
                        if isinstance(member, property):
                            getter = counter.wrap(f"{value.__name__}.{attr}", member.fget)
                            patch(value, attr, property(getter, member.fset, None, member.__doc__))
                        elif callable(member) and (not attr.startswith("__") or attr in _DUNDERS):
                            patch(value, attr, counter.wrap(f"{value.__name__}.{attr}", member))
                elif callable(value) and not isinstance(value, type):
                    wrapped = counter.wrap(f"{module.__name__}.{name}", value)
                    replaced[id(value)] = wrapped
                    patch(module, name, wrapped)
        # Names the Python package imported from the extension (from ._metalrt import x).
        for module_name, module in list(sys.modules.items()):
            if not module_name.startswith("metalrt") or module is None or module_name.startswith(_metalrt.__name__):
                continue
            for name, value in list(vars(module).items()):
                if id(value) in replaced and not isinstance(value, types.ModuleType):
                    patch(module, name, replaced[id(value)])
        yield counter
    finally:
        for owner, name, old in reversed(undo):
            setattr(owner, name, old)
