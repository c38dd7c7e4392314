"""Which scripts keep per-thread state (``threading.local``): their single handler's calls get a
thread each instead of taking turns on one (handlers/pool_worker.Worker.take_turns)."""

from __future__ import annotations

import ast
import sys
import textwrap
import types

import pytest

from tfbatch.handlers.user_code import _thread_local_line, thread_local_use


def _line(source: str) -> int | None:
    return _thread_local_line(ast.parse(textwrap.dedent(source)))


@pytest.mark.parametrize("source,line", [
    ("import threading\n_state = threading.local()\n", 2),
    ("import threading as th\n\nclass State(th.local):\n    pass\n", 3),
    ("from threading import Thread, local as L\n_state = L()\n", 1),
    ("from threading import (\n    Lock,\n    local,\n)\n", 1),
    ("from threading import *\n", 1),
    ("import _threading_local\nx = _threading_local.local()\n", 2),
    ("from _threading_local import local\n", 1),
    ("import _thread\nx = _thread._local()\n", 2),
    # made lazily, inside the handler
    ("def handler(data, context):\n    import threading\n    return threading.local()\n", 3),
])
def test_per_thread_state_is_found_under_any_name(source, line):
    assert _line(source) == line


@pytest.mark.parametrize("source", [
    "import threading\nlock = threading.Lock()\nlocal = 3\n",
    "# threading.local() is not used here\nx = 'threading.local'\n",
    "import json\njson.local = 1\nx = json.local\n",
    "from .threading import local\n",  # a module of the script's own package, not the standard library's
    "from threading import Thread\n",
    "",
])
def test_other_code_is_not_taken_for_it(source):
    assert _line(source) is None


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
                                 "lib/vendored.py": "import threading\nthreading.local()\n"})
    assert thread_local_use(code / "inference.py") is None
    _modules(monkeypatch, code, {"helpers/state.py": "import json\nimport threading\n\nSTATE = threading.local()\n"})
    assert thread_local_use(code / "inference.py") == "helpers/state.py:4"


def test_a_module_that_does_not_parse_is_skipped(tmp_path, monkeypatch):
    code = tmp_path / "code"
    _modules(monkeypatch, code, {"inference.py": "def handler(:\n", "other.py": "x = 1\n"})
    assert thread_local_use(code / "inference.py") is None
