"""Where TF Serving's gRPC modules come from, for tfbatch and for users' handler scripts.

tfbatch answers gRPC with the modules generated into :mod:`tfbatch.tfs.protos` (see
scripts/gen_tfs_protos.py for why they are generated rather than depended on). Their
descriptors are byte-identical to ``tensorflow-serving-api``'s, so both can be loaded in one
process and resolve to the same message classes.

A ``handler`` written for the SageMaker TFS container does ``from tensorflow_serving.apis
import predict_pb2``; that container ships ``tensorflow-serving-api``. When it is not installed,
:func:`provide_tensorflow_serving` lets such imports resolve to tfbatch's copy instead of failing.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

_REAL = "tensorflow_serving"
_OURS = "tfbatch.tfs.protos.tensorflow_serving"


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``tensorflow_serving[.x]`` as the already-generated ``tfbatch.tfs.protos`` module."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == _REAL or fullname.startswith(_REAL + "."):
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec) -> ModuleType:
        # the same module object under both names: one class per message, one descriptor pool entry
        return importlib.import_module(_OURS + spec.name[len(_REAL):])

    def exec_module(self, module: ModuleType) -> None:
        pass


_installed = False


def provide_tensorflow_serving() -> bool:
    """Make ``import tensorflow_serving.apis`` work; True when tfbatch's copy is what it gets."""
    global _installed
    if _installed:
        return True
    if importlib.util.find_spec(_REAL) is not None:
        return False
    sys.meta_path.append(_AliasFinder())
    _installed = True
    return True
