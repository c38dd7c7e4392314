"""Which scripts use what threads share or wait on (``threading.local``, locks, events, queues):
their single handler's calls get a thread each instead of taking turns on one
(handlers/pool_worker.Worker.take_turns)."""

from __future__ import annotations

import ast
import sys
import textwrap
import types

import pytest

from tfbatch.handlers.user_code import _thread_primitive, thread_primitives


def _use(source: str) -> tuple[int, str] | None:
    return _thread_primitive(ast.parse(textwrap.dedent(source)))


@pytest.mark.parametrize("source,use", [
    ("import threading\n_state = threading.local()\n", (2, "threading.local")),
    ("import threading as th\n\nclass State(th.local):\n    pass\n", (3, "threading.local")),
    ("from threading import Thread, local as L\n_state = L()\n", (1, "threading.local")),
    ("from threading import (\n    Thread,\n    Lock,\n)\n", (1, "threading.Lock")),
    ("from threading import *\n", (1, "threading.*")),
    ("import threading\n_lock = threading.Lock()\n", (2, "threading.Lock")),
    ("import threading\n\ndef handler(data, context):\n    with _guard:\n        pass\n\n_guard = threading.RLock()\n",
     (7, "threading.RLock")),
    ("import threading\nready = threading.Event()\n", (2, "threading.Event")),
    ("import threading\nslots = threading.BoundedSemaphore(4)\n", (2, "threading.BoundedSemaphore")),
    ("import _threading_local\nx = _threading_local.local()\n", (2, "_threading_local.local")),
    ("import _thread\nx = _thread.allocate_lock()\n", (2, "_thread.allocate_lock")),
    ("import queue\nclients = queue.Queue()\n", (1, "queue")),
    ("from queue import LifoQueue\n", (1, "queue.LifoQueue")),
    ("import multiprocessing as mp\n", (1, "multiprocessing")),
    ("from multiprocessing.pool import ThreadPool\n", (1, "multiprocessing.pool.ThreadPool")),
    ("from gevent.lock import Semaphore\n", (1, "gevent.lock.Semaphore")),
    ("import eventlet\n", (1, "eventlet")),
    # made lazily, inside the handler
    ("def handler(data, context):\n    import threading\n    return threading.local()\n", (3, "threading.local")),
])
def test_thread_primitives_are_found_under_any_name(source, use):
    assert _use(source) == use


@pytest.mark.parametrize("source", [
    # starting a thread and joining it only blocks; naming the thread is harmless
    "import threading\nt = threading.Thread(target=print)\nname = threading.current_thread().name\n",
    "from threading import Thread, current_thread\n",
    "# threading.local() is not used here\nx = 'threading.Lock'\nlocal = 3\n",
    "import json\njson.local = 1\nx = json.Lock\n",
    "from .threading import local\n",  # a module of the script's own package, not the standard library's
    "from concurrent.futures import ThreadPoolExecutor\n",
    "",
])
def test_other_code_is_not_taken_for_them(source):
    assert _use(source) is None


def _modules(monkeypatch, code, files: dict[str, str]) -> None:
    """Write ``files`` under ``code`` and register each as an imported module."""
    for relative, source in files.items():
        path = code / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        module = types.ModuleType("tfbatch_test_" + "".join(c if c.isalnum() else "_" for c in relative))
        module.__file__ = str(path)
        monkeypatch.setitem(sys.modules, module.__name__, module)


def test_the_scripts_own_modules_are_read_but_not_vendored_ones(tmp_path, monkeypatch):
    code = tmp_path / "code"
    _modules(monkeypatch, code, {"inference.py": "import helpers\n",
                                 "lib/vendored.py": "import threading\nthreading.Lock()\n"})
    assert thread_primitives(code / "inference.py") is None
    _modules(monkeypatch, code, {"helpers/state.py": "import json\nimport threading\n\nSTATE = threading.local()\n"})
    assert thread_primitives(code / "inference.py") == "threading.local at helpers/state.py:4"


def test_a_module_that_does_not_parse_is_skipped(tmp_path, monkeypatch):
    code = tmp_path / "code"
    _modules(monkeypatch, code, {"inference.py": "def handler(:\n", "other.py": "x = 1\n"})
    assert thread_primitives(code / "inference.py") is None


def test_the_script_is_read_even_where_sys_modules_holds_another_scripts_module(tmp_path):
    # "inference" in sys.modules is the last script imported in the process; a job that runs
    # an earlier one again reuses its module (user_code.load_module)
    code = tmp_path / "code"
    code.mkdir()
    (code / "inference.py").write_text("import threading\n\n_call = threading.local()\n")
    assert thread_primitives(code / "inference.py") == "threading.local at inference.py:3"
