"""TF Serving's JSON API (predict, classify, regress, status, metadata) over a ModelServer.

The runtime speaks arrays only (``ModelServer.run``); this is where TF Serving's REST
bodies become arrays and back. The REST routes, the in-process ``/invocations`` path and
the benchmarks' HTTP baseline all call it, so one request body means the same everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tfbatch import errors
from tfbatch.runtime import jsonenc
from tfbatch.runtime.signature import CLASSIFY_METHOD, REGRESS_METHOD, SignatureInfo
from tfbatch.tfs import codec, examples as example_codec

if TYPE_CHECKING:  # a handler worker process imports this module, never the model server
    from tfbatch.runtime import ModelServer, Servable


class TfsApi:
    """TF Serving's JSON methods for the models of one ModelServer (cheap to build per call)."""

    def __init__(self, model_server: ModelServer):
        self.model_server = model_server

    def predict(
        self, body: Mapping[str, Any], name: str | None = None, version: int | str | None = None, *, native: bool = False
    ) -> dict:
        """TF Serving ``:predict``: row or columnar request -> predictions or outputs.

        ``native`` keeps numeric outputs as numpy arrays for ``jsonenc.dumps`` (the HTTP paths).
        """
        outputs, fmt, sig = self.predict_arrays(body, name, version)
        return codec.encode_predict(outputs, fmt, sig, native=native)

    def predict_arrays(
        self, body: Mapping[str, Any], name: str | None = None, version: int | str | None = None
    ) -> tuple[dict, str, SignatureInfo]:
        """``:predict`` up to the model's outputs (for answers that are not TF Serving JSON)."""
        servable = self.model_server.resolve(name, version)
        sig = servable.signature(_signature_name(body))
        tensors, fmt = codec.decode_predict(body, sig, self.model_server.settings.max_request_bytes)
        return self.model_server.run_signature(servable, sig, tensors), fmt, sig

    def numeric_predict(
        self, raw: bytes, name: str | None = None, version: int | str | None = None, *, noted: Any = None
    ) -> tuple[dict, str, SignatureInfo] | None:
        """``predict_arrays`` of a request body still in bytes, where it is numbers alone for
        the default signature (``codec.decode_numeric``: the array read from the text, with no
        Python object per number); None otherwise, and for a model or version that does not
        resolve: the caller then parses the body and goes the general way, which alone names
        what is wrong. Both ways give the same tensors (tests/unit/tfs/test_numeric_bodies.py).

        ``noted``: the body as a script passed it in this process (its ``str``, or bytes).
        Where it is the very text the script's ``json.dumps`` noted on this thread
        (``jsonenc.written_numbers``), the noted array goes to the model and the text is not
        read at all (``written_predict``)."""
        if noted is not None:
            written = jsonenc.written_numbers(noted)
            found = None if written is None else self.written_predict(written, name, version)
            if found is not None:
                return found
        if not isinstance(raw, bytes):
            return None
        try:
            servable = self.model_server.resolve(name, version)
            sig = servable.signature(None)
        except errors.TfbatchError:
            return None
        found = codec.decode_numeric(raw, sig, self.model_server.settings.max_request_bytes)
        if found is None:
            return None
        tensors, fmt = found
        return self.model_server.run_signature(servable, sig, tensors), fmt, sig

    def written_predict(
        self, written: tuple[str, Any, str | None], name: str | None = None, version: int | str | None = None
    ) -> tuple[dict, str, SignatureInfo] | None:
        """``predict_arrays`` of a request a script's ``json.dumps`` noted as it wrote it
        (``jsonenc.written_numbers``: its key, its numbers as an array, the signature it names):
        the array goes to the model without its text being read back. None where the model,
        version or signature does not resolve or the signature is not one numeric input: the
        caller then parses the text and goes the general way, which alone names what is wrong.
        The same tensors either way (``codec.decode_written``,
        tests/integration/transform/test_written_numbers.py)."""
        key, array, named = written
        try:
            servable = self.model_server.resolve(name, version)
            sig = servable.signature(named)  # as TF Serving: None or "" is the default signature
        except errors.TfbatchError:
            return None
        found = codec.decode_written(key, array, sig, self.model_server.settings.max_request_bytes)
        if found is None:
            return None
        tensors, fmt = found
        return self.model_server.run_signature(servable, sig, tensors), fmt, sig

    def classify(self, body: Mapping[str, Any], name: str | None = None, version: int | str | None = None) -> dict:
        servable = self.model_server.resolve(name, version)
        sig = _examples_signature(servable, _signature_name(body), CLASSIFY_METHOD, ("classes", "scores"))
        examples = example_codec.decode_examples(body)
        return example_codec.encode_classify(self.model_server.run_signature(servable, sig, {_examples_input(sig): examples}))

    def regress(self, body: Mapping[str, Any], name: str | None = None, version: int | str | None = None) -> dict:
        servable = self.model_server.resolve(name, version)
        sig = _examples_signature(servable, _signature_name(body), REGRESS_METHOD, ("outputs",))
        examples = example_codec.decode_examples(body)
        return example_codec.encode_regress(self.model_server.run_signature(servable, sig, {_examples_input(sig): examples}))

    def call(self, method: str, body: Mapping[str, Any], name: str | None = None,
             version: int | str | None = None) -> dict:
        """One of ``METHODS`` by name; predict keeps numpy outputs for the HTTP encoders."""
        if method == "predict":
            return self.predict(body, name, version, native=True)
        return self.classify(body, name, version) if method == "classify" else self.regress(body, name, version)

    def status(self, name: str | None = None, version: int | str | None = None) -> dict:
        """TF Serving ``GET /v1/models/<name>[/versions/<v>]``: every version's state, newest first,
        unloaded (END) and failed ones included, as TF Serving reports them."""
        server = self.model_server
        name = name or server.default_model
        states = server.model_status(name)
        if version is None or version == "":
            versions = sorted(states, reverse=True)
        else:
            try:
                wanted = int(version)
            except (TypeError, ValueError):
                wanted = None
            if wanted not in states:
                server.resolve(name, version)  # raises NotFound naming the versions there are
            versions = [wanted]
        return {
            "model_version_status": [
                {
                    "version": str(v),
                    "state": states[v][0],
                    "status": {"error_code": "UNKNOWN" if states[v][1] else "OK", "error_message": states[v][1]},
                }
                for v in versions
            ]
        }

    def metadata(self, name: str | None = None, version: int | str | None = None) -> dict:
        """TF Serving ``GET /v1/models/<name>[/versions/<v>]/metadata``."""
        servable = self.model_server.resolve(name, version)
        return {
            "model_spec": {"name": servable.name, "signature_name": "", "version": str(servable.version)},
            "metadata": {
                "signature_def": {
                    "signature_def": {k: v.to_tfs() for k, v in sorted(servable.signatures.items())},
                    "@type": "type.googleapis.com/tensorflow.serving.SignatureDefMap",
                }
            },
        }


def _signature_name(body: Any) -> str | None:
    if not isinstance(body, Mapping):
        raise errors.InvalidInput(f"request body must be a JSON object, got {type(body).__name__}")
    name = body.get("signature_name")
    if name is not None and not isinstance(name, str):
        raise errors.InvalidInput(f"'signature_name' must be a string, got {name!r}")
    return name or None


def _examples_input(sig: SignatureInfo) -> str:
    return next(iter(sig.inputs))


def _examples_signature(
    servable: Servable, requested: str | None, method: str, outputs: tuple[str, ...]
) -> SignatureInfo:
    """The signature for classify/regress.

    TF Serving requires the signature's method_name to be the API's. TF2 exports always
    say "predict", so a signature taking one string tensor of serialized Examples and
    returning the API's output keys is accepted too. Without signature_name, the default
    signature is used if it fits, else the only signature of that method.
    """
    verb = method.rsplit("/", 1)[-1]

    def fits(sig: SignatureInfo) -> bool:
        if sig.method_name == method:
            return True
        return (
            len(sig.inputs) == 1
            and next(iter(sig.inputs.values())).is_string
            and any(k in sig.outputs for k in outputs)
        )

    if requested:
        sig = servable.signature(requested)
        if not fits(sig):
            raise errors.InvalidInput(
                f"signature {sig.name!r} of model {servable.name!r} cannot {verb}: its method is "
                f"{sig.method_name!r}, expected {method!r}"
            )
        return sig
    default = servable.signature(None)
    if default.method_name == method:
        return default
    candidates = [s for s in servable.signatures.values() if s.method_name == method]
    if len(candidates) == 1:
        return candidates[0]
    if fits(default):
        return default
    raise errors.InvalidInput(
        f"model {servable.name!r} version {servable.version} has "
        f"{'no' if not candidates else 'several'} {verb} signatures"
        f"{'' if not candidates else ' (' + ', '.join(sorted(s.name for s in candidates)) + ')'}; "
        f"name one with 'signature_name'"
    )
