"""Loading ``code/inference.py`` the way the SageMaker TFS container does.

The script is imported once per process as module ``inference``, with ``code/lib`` (vendored
dependencies) and ``code/`` itself on ``sys.path``. ``code/requirements.txt`` is installed only
when the user asks for it: tfbatch never reaches the network behind the user's back.
"""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

from tfbatch.errors import DependencyMissing, HandlerError
from tfbatch.tfs.serving_apis import provide_tensorflow_serving

log = logging.getLogger(__name__)

MODULE_NAME = "inference"
_lock = threading.Lock()
_loaded: dict[Path, ModuleType] = {}


@dataclass(frozen=True)
class UserHandlers:
    """What a script provides: a single ``handler``, or the ``input_handler``/``output_handler`` pair."""

    script: Path
    handler: Callable | None = None
    input_handler: Callable | None = None
    output_handler: Callable | None = None

    @property
    def mode(self) -> str:
        return "handler" if self.handler is not None else "pair"


def install_requirements(code_dir: Path) -> None:
    """pip-install ``code/requirements.txt`` into the running interpreter (only when asked).

    As in the container, a ``code/lib`` folder means the dependencies are vendored and
    requirements.txt is ignored.
    """
    req = code_dir / "requirements.txt"
    if (code_dir / "lib").is_dir() or not req.is_file():
        return
    log.info("installing %s (requested with --install-requirements)", req)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-r", str(req)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise DependencyMissing(
            f"installing {req} failed (pip exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )


def _missing_dependency(script: Path, exc: ModuleNotFoundError) -> DependencyMissing:
    code_dir = script.parent
    req = code_dir / "requirements.txt"
    hint = (
        f"; {req} lists the script's requirements: rerun with --install-requirements to "
        "pip-install them, or vendor them under code/lib"
        if req.is_file()
        else "; install it into this environment or vendor it under code/lib"
    )
    return DependencyMissing(f"{script} imports '{exc.name}', which is not installed{hint}")


def load_module(script: Path) -> ModuleType:
    """Import ``script`` as module ``inference`` once per process (module code runs once)."""
    script = Path(script).resolve()
    with _lock:
        if script in _loaded:
            return _loaded[script]
        code_dir = script.parent
        for extra in (code_dir / "lib", code_dir):
            if extra.is_dir() and str(extra) not in sys.path:
                sys.path.insert(0, str(extra))
        # scripts written for the SageMaker container import tensorflow_serving.apis
        provide_tensorflow_serving()
        spec = importlib.util.spec_from_file_location(MODULE_NAME, script)
        if spec is None or spec.loader is None:
            raise HandlerError(f"cannot import handler script {script}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[MODULE_NAME] = module
        try:
            spec.loader.exec_module(module)
        except ModuleNotFoundError as exc:
            sys.modules.pop(MODULE_NAME, None)
            raise _missing_dependency(script, exc) from exc
        except Exception as exc:
            sys.modules.pop(MODULE_NAME, None)
            raise HandlerError(f"importing handler script {script} failed: {type(exc).__name__}: {exc}") from exc
        _loaded[script] = module
        return module


def load_handlers(script: Path, *, install: bool = False) -> UserHandlers:
    """Load a script and check it provides ``handler`` or both halves of the pair."""
    script = Path(script)
    if install:
        install_requirements(script.parent)
    module = load_module(script)
    handler = getattr(module, "handler", None)
    input_handler = getattr(module, "input_handler", None)
    output_handler = getattr(module, "output_handler", None)
    if callable(handler):
        return UserHandlers(script=script, handler=handler)
    if callable(input_handler) and callable(output_handler):
        return UserHandlers(script=script, input_handler=input_handler, output_handler=output_handler)
    # Same words as the SageMaker container, so users searching the message find the cause.
    raise HandlerError(
        f"Handlers are not implemented correctly in user script. {script} must define "
        "handler(data, context), or both input_handler(data, context) and "
        "output_handler(response, context)"
    )
