"""Loading ``code/inference.py`` the way the SageMaker TFS container does.

The script is imported once per process as module ``inference``, with ``code/lib`` (vendored
dependencies) and ``code/`` itself on ``sys.path``. ``code/requirements.txt`` is installed only
when the user asks for it: tfbatch never reaches the network behind the user's back.

Once imported, the script's own ``json.dumps`` and ``json.loads`` (through ``import json`` or
``from json import dumps, loads``; in the script and in the modules of ``code/`` and
``code/lib`` it imported) write and read through orjson wherever that gives the
standard library's exact text and values (``runtime/jsonenc.dumps_like_stdlib``): the JSON of
TF Serving's ``"instances"`` is most of a typical script's CPU. ``TFBATCH_STDLIB_JSON=1``
leaves the script's JSON names alone. Its ``base64`` encode and decode functions (``import
base64`` or ``from base64 import b64encode``) are pybase64-backed look-alikes with the standard
library's bytes and errors (``runtime/base64like``): the ``{"b64": ...}`` of each image.
"""

from __future__ import annotations

import ast
import base64
import importlib.util
import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

from tfbatch.errors import DependencyMissing, HandlerError
from tfbatch.runtime import base64like
from tfbatch.runtime.jsonenc import dumps_like_stdlib, loads_like_stdlib
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
        swaps = _script_swaps(json_too=not _stdlib_json_asked())
        for imported in _modules_under(code_dir):  # the script and its own modules (code/, code/lib/)
            _swap_names(imported, swaps)
        _loaded[script] = module
        return module


def _stdlib_json_asked(env=os.environ) -> bool:
    """``TFBATCH_STDLIB_JSON`` is true (read here, not through ``settings``: a handler worker
    process does not import pydantic; ``settings.EnvironmentValues`` checks the value)."""
    return env.get("TFBATCH_STDLIB_JSON", "").strip().lower() in ("1", "true", "yes", "on")


def _modules_under(folder: Path) -> list[ModuleType]:
    """The imported modules whose source file lies in ``folder`` or below it."""
    root = str(folder) + os.sep
    return [m for m in list(sys.modules.values())
            if isinstance(getattr(m, "__file__", None), str) and m.__file__.startswith(root)]


def _script_module(original: ModuleType, replaced: dict[str, Callable]) -> ModuleType:
    """A module like ``original`` whose names in ``replaced`` are the look-alikes; every other
    name (``json.dump``, ``json.JSONDecodeError``, ``base64.urlsafe_b64encode``, ...) is the
    standard library's."""
    module = ModuleType(original.__name__, original.__doc__)
    module.__dict__.update({k: v for k, v in vars(original).items() if k not in ("__name__", "__doc__")})
    module.__dict__.update(replaced)
    return module


_SCRIPT_JSON = _script_module(json, {"dumps": dumps_like_stdlib, "loads": loads_like_stdlib})
_SCRIPT_BASE64 = _script_module(base64, base64like.LOOK_ALIKES)


def _script_swaps(*, json_too: bool) -> dict[int, object]:
    """What a script's global names are pointed at, by the id of what they were: ``base64`` and
    its encode/decode functions always (the look-alikes give the same bytes and errors), ``json``
    and ``json.dumps``/``json.loads`` unless ``TFBATCH_STDLIB_JSON`` asks otherwise."""
    swaps: dict[int, object] = {id(base64): _SCRIPT_BASE64}
    swaps.update({id(getattr(base64, name)): fast for name, fast in base64like.LOOK_ALIKES.items()})
    if json_too:
        swaps.update({id(json): _SCRIPT_JSON, id(json.dumps): dumps_like_stdlib, id(json.loads): loads_like_stdlib})
    return swaps


def _swap_names(module: ModuleType, swaps: dict[int, object]) -> None:
    """Point the module's globals that are one of the swapped objects at its look-alike (the
    standard library itself is left as it is, for everyone else)."""
    namespace = vars(module)
    for name, value in list(namespace.items()):
        if id(value) in swaps:  # the very object: both it and the module are alive
            namespace[name] = swaps[id(value)]


# What threads share or wait on, by module: per-thread state (gevent makes it a greenlet's own)
# and what blocks until another thread acts (gevent makes that switch greenlets instead).
# None: every name of the module.
_THREAD_PRIMITIVES: dict[str, frozenset[str] | None] = {
    "threading": frozenset({"local", "Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore", "Event",
                            "Barrier"}),
    "_thread": frozenset({"_local", "allocate_lock", "allocate", "LockType", "RLock"}),
    "_threading_local": frozenset({"local"}),
    "queue": None,
    "multiprocessing": None,
    # A script that drives greenlets itself (its own hub, its own locks) expects gevent's
    # patched world; on greenlets of tfbatch's it could switch away for good.
    "gevent": None,
    "eventlet": None,
}


def thread_primitives(script: Path) -> str | None:
    """Where the script's own code uses what threads share or wait on, as ``module.name at
    file:line``; None where it does not.

    A single handler's calls that take turns on one thread (batching/cooperative.py) share
    that thread's ``threading.local``, and a call that waits on a lock, event or queue that
    a paused call of the same thread holds or would fill never wakes: the thread, and the
    job, hang. The container's gevent workers patch these into greenlet-aware ones; a thread
    per call does not need them to be. So where the script uses any of them, its calls get a
    thread each.

    Read from the source of the script and of the modules of ``code/`` it has imported
    (``code/lib``'s vendored libraries are left out, as site-packages are), whatever name
    the module was imported under: ``threading.local``/``Lock``/``RLock``/``Condition``/
    ``Semaphore``/``Event``/``Barrier`` (and ``_thread``'s and ``_threading_local``'s), and
    anything from ``queue``, ``multiprocessing``, ``gevent`` or ``eventlet``. ``threading.Thread`` and
    ``current_thread`` are fine: a call that starts a thread and joins it only blocks.
    """
    script = Path(script).resolve()
    code_dir = script.parent
    lib = str(code_dir / "lib") + os.sep
    # The script itself whatever sys.modules holds: "inference" is the last script imported in
    # this process (a notebook's second job), and load_module reuses the first one's module.
    files = {str(script)} | {m.__file__ for m in _modules_under(code_dir) if not m.__file__.startswith(lib)}
    found = []
    for file in files:
        try:
            tree = ast.parse(Path(file).read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        use = _thread_primitive(tree)
        if use is not None:
            line, name = use
            found.append((Path(file).relative_to(code_dir).as_posix(), line, name))
    if not found:
        return None
    file, line, name = min(found)
    return f"{name} at {file}:{line}"


def _primitive(module: str, name: str) -> bool:
    names = _THREAD_PRIMITIVES[module]
    return names is None or name in names or name == "*"


def _thread_primitive(tree: ast.AST) -> tuple[int, str] | None:
    """(line, ``module.name``) of the first use in ``tree`` of a thread primitive, or None."""
    aliases: dict[str, str] = {}  # a name a module of _THREAD_PRIMITIVES is bound to -> the module
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.partition(".")[0]
                if top in _THREAD_PRIMITIVES:
                    if _THREAD_PRIMITIVES[top] is None:  # the module itself is the primitive
                        uses.append((node.lineno, alias.name))
                    aliases[alias.asname or top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            top = node.module.partition(".")[0]
            if top in _THREAD_PRIMITIVES:
                uses.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names
                            if top != node.module or _primitive(top, alias.name))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and _primitive(aliases[node.value.id], node.attr)):
            uses.append((node.lineno, f"{aliases[node.value.id]}.{node.attr}"))
    return min(uses) if uses else None


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
