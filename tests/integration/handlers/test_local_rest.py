"""A handler's ``requests`` call to ``context.rest_uri`` in the model's own process is answered in
process (handlers/local_rest.py): the same bytes and status as the live loopback endpoint, for
the calls it diverts, and only those."""

import json
import socket
import urllib.error
import urllib.request

import pytest
import requests

from tfbatch.handlers import local_rest
from tfbatch.handlers.service import InferenceService
from tfbatch.handlers.user_code import load_handlers
from tfbatch.tfs.loopback import LoopbackEndpoints

HANDLER = """
import requests

def handler(data, context):
    response = requests.post(context.rest_uri, data=data.read())
    return response.content, "application/json"
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _over_http(method: str, url: str, body: bytes | None = None) -> tuple[int, dict]:
    """urllib (never diverted): the live loopback endpoint's answer. This process started it,
    so the loopback guard lets it in without the token."""
    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def live(write_script, tmp_path, linear_server):
    endpoints = LoopbackEndpoints(linear_server).start()
    handlers = load_handlers(write_script(tmp_path / "code", HANDLER))
    service = InferenceService(linear_server, handlers, rest_port=endpoints.rest_port)
    yield service, f"http://localhost:{endpoints.rest_port}/v1/models/model"
    local_rest.unregister(endpoints.rest_port)
    endpoints.stop()


@pytest.mark.parametrize("method, path, body", [
    ("POST", ":predict", {"instances": [[1.0, 2.0, 3.0], [0.5, 0.0, -1.0]]}),
    ("POST", "/versions/1:predict", {"inputs": {"x": [[1.0, 2.0, 3.0]]}}),
    ("POST", "/versions/9:predict", {"instances": [[1.0, 2.0, 3.0]]}),  # no such version: 404
    ("POST", ":predict", {"instances": [[1.0, 2.0]]}),  # wrong shape: 400
    ("POST", ":predict", b"{not json"),
    ("POST", ":explain", {"instances": [[1.0, 2.0, 3.0]]}),  # no such method: 404
    ("GET", "", None),  # model status
    ("GET", "/versions/2/metadata", None),
])
def test_diverted_calls_answer_as_the_live_endpoint_does(live, method, path, body):
    _, base = live
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    expected = _over_http(method, base + path, data)
    with requests.Session() as session:  # a script's own Session takes the same route
        for call in (requests.request, session.request):
            response = call(method, base + path, data=data)
            assert isinstance(response, requests.Response)
            assert (response.status_code, response.json()) == expected
            assert response.headers["Content-Type"] == "application/json"


def test_a_handler_reaches_a_port_nothing_listens_on(write_script, tmp_path, linear_server):
    # Registered but never served: only the in-process answer can reach it.
    port = _free_port()
    url = f"http://localhost:{port}/v1/models/model:predict"
    with pytest.raises(requests.ConnectionError):  # before it is registered, requests dials it
        requests.post(url, data=b"{}", timeout=10)
    handlers = load_handlers(write_script(tmp_path / "code", HANDLER))
    service = InferenceService(linear_server, handlers, rest_port=port)
    from tfbatch.handlers.service import InvocationRequest

    reply = service.invoke(InvocationRequest(body=b'{"instances": [[1.0, 2.0, 3.0]]}'))
    assert reply.status == 200, reply.body
    assert requests.post(url, data=b'{"instances": [[1.0, 2.0, 3.0]]}').status_code == 200  # the same URL, now
    assert len(json.loads(reply.body)["predictions"]) == 1
    with pytest.raises(urllib.error.URLError):  # a client that is not requests still dials it
        _over_http("POST", f"http://localhost:{port}/v1/models/model:predict", b"{}")
    with pytest.raises(requests.ConnectionError):  # another port, or another host, is not diverted
        requests.post(f"http://localhost:{_free_port()}/v1/models/model:predict", data=b"{}", timeout=10)
    local_rest.unregister(port)
    with pytest.raises(requests.ConnectionError):  # unregistered: requests dials it too
        requests.post(f"http://localhost:{port}/v1/models/model:predict", data=b"{}", timeout=10)
    del service


@pytest.fixture
def counted(live, monkeypatch):
    """(base URL, predict URL, a request body, the live endpoint's answer to it, the requests
    Session.send saw for that endpoint): Session.send is counted (and still run) to see which
    calls took it. Only calls to the endpoint count: another thread of the test process (a Ray
    worker's metrics poll, say) may send its own requests meanwhile."""
    _, base = live
    url = base + ":predict"
    body = json.dumps({"instances": [[1.0, 2.0, 3.0]]})
    expected = _over_http("POST", url, body.encode())
    sends = []
    send = requests.Session.send

    def counted_send(self, request, **kw):
        if request.url.startswith(base):
            sends.append(request)
        return send(self, request, **kw)

    monkeypatch.setattr(requests.Session, "send", counted_send)
    return base, url, body, expected, sends


def test_plain_posts_skip_the_session_and_answer_as_the_session_does(counted):
    # requests.post(url, data=...) and requests.post(url, json=...) are answered without
    # Session.request (handlers/local_rest._direct); query strings and params still go through
    # it: same answer, and the response carries what a Session's would.
    base, url, body, expected, sends = counted
    plain = requests.post(url, data=body, headers={"X-Trace": "1"}, timeout=5)
    assert sends == []
    assert (plain.status_code, plain.json()) == expected
    assert plain.request.method == "POST" and plain.request.url == url and plain.request.body == body
    assert plain.request.headers["X-Trace"] == "1" and plain.request.headers["Content-Length"] == str(len(body))
    assert plain.url == url and plain.ok and plain.elapsed.total_seconds() >= 0
    assert isinstance(plain.connection, local_rest.LocalAdapter)
    as_json = requests.post(url, json={"instances": [[1.0, 2.0, 3.0]]})  # direct too, body as requests makes it
    assert sends == [] and (as_json.status_code, as_json.json()) == expected
    made = requests.Request("POST", url, json={"instances": [[1.0, 2.0, 3.0]]}).prepare()
    assert as_json.request.body == made.body and as_json.request.headers["Content-Type"] == "application/json"
    assert as_json.request.headers["Content-Length"] == made.headers["Content-Length"]
    with pytest.raises(requests.exceptions.InvalidJSONError):  # what JSON refuses: requests' own error
        requests.post(url, json={"instances": [[float("nan")]]})
    routed = requests.post(url + "?trace=1", data=body)
    assert len(sends) == 1
    assert (routed.status_code, routed.json()) == expected
    assert isinstance(routed.connection, local_rest.LocalAdapter)
    status = _over_http("GET", base)[1]
    assert requests.get(base).json() == status and len(sends) == 1  # no body: direct too
    assert requests.get(base, params={"a": "1"}).json() == status and len(sends) == 2


class _Signing(requests.Session):
    """A Session that adds a header in its own step: its calls must take that step."""

    def prepare_request(self, request):
        prepared = super().prepare_request(request)
        prepared.headers["X-Signed"] = "yes"
        return prepared


def _with(session: requests.Session, **attrs) -> requests.Session:
    for name, value in attrs.items():
        if name == "cookies":
            session.cookies.set("k", "v")
        elif name == "hooks":
            session.hooks["response"].append(value)
        else:
            setattr(session, name, value)
    return session


def test_a_scripts_own_session_is_answered_directly_unless_it_changes_the_call(counted):
    # session = requests.Session() at import, session.post(...) per record: a plain Session's
    # calls skip its request preparation (and its proxy and netrc look-ups) with its headers
    # kept; a Session with auth, cookies, params, response hooks or a step of its own still
    # prepares and sends each call. Every one gets the live endpoint's answer.
    _, url, body, expected, sends = counted
    with requests.Session() as session:
        session.headers["X-Job"] = "j1"
        plain = session.post(url, data=body, headers={"X-Trace": "1", "Accept-Encoding": None},
                             timeout=5, verify=False, stream=False)
    assert sends == []
    assert (plain.status_code, plain.json()) == expected
    headers = plain.request.headers
    assert headers["X-Job"] == "j1" and headers["X-Trace"] == "1" and "Accept-Encoding" not in headers
    assert headers["Content-Length"] == str(len(body)) and isinstance(plain.connection, local_rest.LocalAdapter)
    assert "X-Trace" not in session.headers and "Accept-Encoding" in session.headers  # the Session's own are kept
    seen = []
    variants = [_with(requests.Session(), auth=("user", "secret")), _with(requests.Session(), cookies=True),
                _with(requests.Session(), params={"trace": "1"}),
                _with(requests.Session(), hooks=lambda response, **kw: seen.append(response.status_code)),
                _Signing()]
    for number, session in enumerate(variants, 1):
        with session:
            response = session.post(url, data=body)
        assert len(sends) == number, session
        assert (response.status_code, response.json()) == expected
    assert seen == [200]  # the response hook ran
    assert sends[-1].headers["X-Signed"] == "yes"
