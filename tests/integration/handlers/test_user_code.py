import sys
import zipfile

import pytest

from tfbatch.errors import DependencyMissing, HandlerError
from tfbatch.handlers.user_code import load_handlers, load_module


def test_single_handler_wins_over_pair(write_script, tmp_path):
    script = write_script(tmp_path / "code", """
        def handler(data, context): return b"h", "text/plain"
        def input_handler(data, context): return data.read()
        def output_handler(response, context): return response.content, "application/json"
    """)
    handlers = load_handlers(script)
    assert handlers.mode == "handler"
    assert handlers.input_handler is None


def test_pair_mode(write_script, tmp_path):
    script = write_script(tmp_path / "code", """
        def input_handler(data, context): return data.read()
        def output_handler(response, context): return response.content, "application/json"
    """)
    assert load_handlers(script).mode == "pair"


@pytest.mark.parametrize("only", ["input_handler", "output_handler"])
def test_half_a_pair_is_the_containers_error(write_script, tmp_path, only):
    script = write_script(tmp_path / only / "code", f"def {only}(a, b): return a\n")
    with pytest.raises(HandlerError, match="Handlers are not implemented correctly in user script"):
        load_handlers(script)


def test_module_code_runs_once_and_is_named_inference(write_script, tmp_path):
    script = write_script(tmp_path / "code", """
        COUNT = [0]
        COUNT[0] += 1
        def handler(data, context): return str(COUNT[0]), "text/plain"
    """)
    first = load_module(script)
    again = load_module(script)
    assert first is again
    assert first.__name__ == "inference"
    assert first.COUNT == [1]


def test_code_lib_is_importable(write_script, tmp_path):
    code = tmp_path / "code"
    (code / "lib" / "vendored_pkg_tfb").mkdir(parents=True)
    (code / "lib" / "vendored_pkg_tfb" / "__init__.py").write_text("VALUE = 42\n")
    script = write_script(code, """
        import vendored_pkg_tfb
        def handler(data, context): return str(vendored_pkg_tfb.VALUE), "text/plain"
    """)
    assert load_handlers(script).handler(None, None) == ("42", "text/plain")


def test_missing_dependency_names_package_and_flag(write_script, tmp_path):
    code = tmp_path / "code"
    script = write_script(code, "import tfbatch_no_such_pkg\ndef handler(d, c): pass\n")
    (code / "requirements.txt").write_text("tfbatch_no_such_pkg==1.0\n")
    with pytest.raises(DependencyMissing) as err:
        load_handlers(script)
    assert "tfbatch_no_such_pkg" in str(err.value)
    assert "--install-requirements" in str(err.value)


def test_script_import_error_is_reported_with_the_script(write_script, tmp_path):
    script = write_script(tmp_path / "code", "raise RuntimeError('boom at import')\n")
    with pytest.raises(HandlerError, match="boom at import") as err:
        load_handlers(script)
    assert str(script.resolve()) in str(err.value)


def _write_wheel(directory, name: str) -> str:
    """A minimal pure-Python wheel, so pip can install it without any network."""
    wheel = directory / f"{name}-1.0-py3-none-any.whl"
    dist = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{name}/__init__.py", "ANSWER = 7\n")
        zf.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}/RECORD", "")
    return str(wheel)


def test_requirements_installed_only_when_asked(write_script, tmp_path):
    import subprocess

    name = "tfbatch_req_probe"
    code = tmp_path / "code"
    script = write_script(code, f"import {name}\ndef handler(d, c): return str({name}.ANSWER), 'text/plain'\n")
    (code / "requirements.txt").write_text(_write_wheel(tmp_path, name) + "\n")
    with pytest.raises(DependencyMissing):
        load_handlers(script)  # not asked: nothing installed
    try:
        handlers = load_handlers(script, install=True)
        assert handlers.handler(None, None) == ("7", "text/plain")
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", name], check=False)
        sys.modules.pop(name, None)


_JSON_SCRIPT = """
    import json
    import json as js
    from json import dumps, loads, JSONDecodeError

    def input_handler(data, context):
        return json.dumps({"instances": loads(data.read())})

    def output_handler(response, context):
        return js.dumps(json.loads(response.content), separators=(",", ":")), "application/json"

    def names():
        return json, js, dumps, loads, JSONDecodeError
"""


def test_a_scripts_json_writes_and_reads_through_the_look_alikes(write_script, tmp_path, monkeypatch):
    import json

    from tfbatch.runtime.jsonenc import dumps_like_stdlib, loads_like_stdlib

    monkeypatch.delenv("TFBATCH_STDLIB_JSON", raising=False)
    module = load_module(write_script(tmp_path / "code", _JSON_SCRIPT))
    mod_json, js, dumps, loads, error = module.names()
    assert mod_json is js and mod_json is not json  # the script's own name, not the module
    assert (mod_json.dumps, mod_json.loads, dumps, loads) == (dumps_like_stdlib, loads_like_stdlib) * 2
    assert error is json.JSONDecodeError and mod_json.JSONDecodeError is json.JSONDecodeError
    assert mod_json.dump is json.dump and mod_json.JSONEncoder is json.JSONEncoder
    assert json.dumps is not dumps_like_stdlib  # the standard library itself is untouched
    rows = [[0.1, 1 / 3, -2.5e-7], [1e16, 0.0, 7]]
    assert mod_json.dumps({"instances": rows}) == json.dumps({"instances": rows})


def test_stdlib_json_leaves_a_scripts_json_alone(write_script, tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("TFBATCH_STDLIB_JSON", "1")
    module = load_module(write_script(tmp_path / "code", _JSON_SCRIPT))
    assert module.names() == (json, json, json.dumps, json.loads, json.JSONDecodeError)


_BASE64_SCRIPT = """
    import base64
    import base64 as b64
    from base64 import b64encode, b64decode, urlsafe_b64encode

    def input_handler(data, context):
        return '{"instances": [{"b64": "%s"}]}' % b64encode(data.read()).decode()

    def names():
        return base64, b64, b64encode, b64decode, urlsafe_b64encode
"""


@pytest.mark.parametrize("stdlib_json", ["", "1"])
def test_a_scripts_base64_encodes_and_decodes_through_the_look_alikes(write_script, tmp_path, monkeypatch,
                                                                       stdlib_json):
    import base64

    from tfbatch.runtime import base64like

    monkeypatch.setenv("TFBATCH_STDLIB_JSON", stdlib_json)  # JSON's switch leaves base64's alone
    module = load_module(write_script(tmp_path / "code", _BASE64_SCRIPT))
    mod, alias, encode, decode, urlsafe = module.names()
    assert mod is alias and mod is not base64  # the script's own name, not the module
    assert (mod.b64encode, mod.b64decode, encode, decode) == (base64like.b64encode, base64like.b64decode) * 2
    assert (mod.standard_b64encode, mod.standard_b64decode) == (base64like.standard_b64encode,
                                                                base64like.standard_b64decode)
    assert urlsafe is base64.urlsafe_b64encode and mod.encodebytes is base64.encodebytes
    assert base64.b64encode is not base64like.b64encode  # the standard library itself is untouched
    image = bytes(range(256)) * 90
    assert mod.b64decode(mod.b64encode(image).decode()) == image == base64.b64decode(base64.b64encode(image))


def test_the_scripts_own_modules_get_the_look_alikes_too(write_script, tmp_path, monkeypatch):
    import json

    from tfbatch.runtime.jsonenc import dumps_like_stdlib

    monkeypatch.delenv("TFBATCH_STDLIB_JSON", raising=False)
    code = tmp_path / "code"
    (code / "lib" / "vendored_json_tfb").mkdir(parents=True)
    (code / "lib" / "vendored_json_tfb" / "__init__.py").write_text("from json import dumps\n")
    (code / "helper_json_tfb.py").write_text("import json\n")
    module = load_module(write_script(code, """
        import helper_json_tfb
        import vendored_json_tfb
        import requests
    """))
    assert module.helper_json_tfb.json.dumps is dumps_like_stdlib
    assert module.vendored_json_tfb.dumps is dumps_like_stdlib
    # a library outside code/ keeps its own json, and so does the standard library
    assert sys.modules["requests.compat"].json in (json, sys.modules.get("simplejson"))
    assert json.dumps is not dumps_like_stdlib
