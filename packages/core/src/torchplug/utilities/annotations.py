"""Real types in the constructor signatures users inspect, in modules whose annotations are postponed.

torchplug's modules use ``from __future__ import annotations``, which keeps every annotation as
a string. Tools and user code that read ``inspect.signature(ModelCheckpoint).parameters`` (a
command-line parser, a config system, a test that asserts a parameter's type) expect the types
themselves, as Lightning's classes give. A class that sets ``__signature__ = RealSignature()``
(the bases ``Callback``, ``Logger`` and ``Profiler`` do, and ``Trainer``) has them: the first
``inspect.signature`` of it evaluates the string annotations of the ``__init__`` it uses, in the
namespace of that ``__init__``'s module (what the module imports at run time). Nothing is
evaluated before a signature is asked for, so importing torchplug or building a Trainer pays
nothing for it.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["RealSignature", "real_init_annotations"]

_MISSING = object()


class RealSignature:
    """Set as a class's ``__signature__``: ``inspect.signature(cls)`` then shows its ``__init__``'s real types.

    When inspect asks a class for ``__signature__``, the string annotations of the ``__init__`` it
    will read are evaluated (:func:`real_init_annotations`) and None is returned, so inspect builds
    the signature as usual. Subclasses inherit it; users' own classes (outside torchplug and its
    plugin packages) keep their annotations as they wrote them.
    """

    def __get__(self, instance: object, owner: type) -> None:
        if instance is None:
            definer = next((cls for cls in owner.__mro__ if "__init__" in vars(cls)), None)
            if definer is not None and definer.__module__.partition(".")[0].startswith("torchplug"):
                real_init_annotations(definer)


def real_init_annotations(cls: type) -> None:
    """Replace the string annotations of ``cls.__init__`` by the objects they name.

    An annotation whose names its module imports only for type checkers stays a string (an
    inspection never fails because of one): the test of the public signatures finds those.
    """
    init = inspect.unwrap(vars(cls)["__init__"])
    annotations = getattr(init, "__annotations__", None) or {}
    namespace = getattr(init, "__globals__", {})
    for name, annotation in annotations.items():
        if isinstance(annotation, str):
            value = _evaluate(annotation, namespace)
            if value is not _MISSING:
                annotations[name] = value


def _evaluate(annotation: str, namespace: dict[str, Any]) -> Any:
    try:
        return eval(annotation, namespace)  # torchplug's own annotations, in their own module
    except Exception:  # a name imported only for type checkers: the annotation stays a string
        return _MISSING
