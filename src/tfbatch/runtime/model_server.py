"""Every version of every model, run in-process on arrays with TF Serving's lookup semantics.

The HTTP/gRPC server and the batch transform engine both call this object; it never
speaks a network protocol or a JSON body itself (``tfbatch.tfs.api`` does). With batching enabled, requests to the same
(model, version, signature) are coalesced by one :class:`DynamicBatcher` each; unlike TF
Serving, a request larger than ``max_batch_size`` is split across batches, not refused.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tfbatch import errors
from tfbatch.batching import DynamicBatcher
from tfbatch.runtime.servable import Servable
from tfbatch.runtime.settings import RuntimeSettings
from tfbatch.runtime.signature import SignatureInfo
from tfbatch.runtime.threads import configure_threads

log = logging.getLogger(__name__)


class ModelServer:
    """Loads ``{name: {version: path}}`` eagerly; thread-safe for concurrent requests."""

    def __init__(
        self,
        models: Mapping[str, Mapping[int, str | Path]],
        settings: RuntimeSettings | None = None,
        default_model: str | None = None,
    ):
        self.settings = settings or RuntimeSettings()
        if not models:
            raise errors.ArtifactError("no models to serve")
        configure_threads(self.settings)
        self._servables: dict[str, dict[int, Servable]] = {}
        for name in sorted(models):
            versions = models[name]
            if not versions:
                raise errors.ArtifactError(f"model {name!r} has no versions")
            self._servables[name] = {
                int(v): Servable.load(name, int(v), p) for v, p in sorted(versions.items(), key=lambda kv: int(kv[0]))
            }
        default = default_model or self.settings.default_model_name
        if default is not None and default not in self._servables:
            raise errors.NotFound(
                f"default model {default!r} not found; available models: {', '.join(self.model_names())}"
            )
        self.default_model = default or self.model_names()[0]
        self._batchers: dict[tuple[str, int, str], DynamicBatcher] = {}
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_artifact(cls, artifact: Any, settings: RuntimeSettings | None = None) -> ModelServer:
        """From the artifact subsystem's object: ``artifact.models[name].versions`` ({version: path})
        and ``artifact.default_model_name``."""
        models = {name: dict(m.versions) for name, m in artifact.models.items()}
        default = getattr(artifact, "default_model_name", None)
        if settings is not None and settings.default_model_name:
            default = settings.default_model_name
        return cls(models, settings=settings, default_model=default)

    def unbatched(self) -> ModelServer:
        """A view over the same loaded servables whose calls never go through a batcher.

        For re-running one request alone after the batch it shared failed. The view shares
        this server's models and batchers; close this server, not the view.
        """
        view = copy.copy(self)
        view.settings = self.settings.model_copy(update={"enable_batching": False})
        return view

    # ---- lookup ------------------------------------------------------------------------

    def model_names(self) -> list[str]:
        return sorted(self._servables)

    def versions(self, name: str | None = None) -> list[int]:
        return sorted(self._versions_of(name or self.default_model))

    def _versions_of(self, name: str) -> dict[int, Servable]:
        versions = self._servables.get(name)
        if versions is None:
            raise errors.NotFound(
                f"model {name!r} not found; available models: {', '.join(self.model_names())}"
            )
        return versions

    def resolve(self, name: str | None = None, version: int | str | None = None) -> Servable:
        """The servable for ``name`` (None -> default model) at ``version`` (None -> latest)."""
        name = name or self.default_model
        versions = self._versions_of(name)
        if version is None or version == "":
            return versions[max(versions)]
        try:
            v = int(version)
        except (TypeError, ValueError):
            raise errors.NotFound(
                f"model {name!r} has no version {version!r}: versions are integers; "
                f"available versions: {', '.join(map(str, sorted(versions)))}"
            ) from None
        servable = versions.get(v)
        if servable is None:
            raise errors.NotFound(
                f"model {name!r} has no version {v}; available versions: "
                f"{', '.join(map(str, sorted(versions)))}"
            )
        return servable

    # ---- tensors -----------------------------------------------------------------------

    def run(
        self,
        inputs: Mapping[str, Any],
        name: str | None = None,
        version: int | str | None = None,
        signature_name: str | None = None,
    ) -> dict[str, np.ndarray]:
        """Run tensors through a signature (the gRPC and batch-engine path)."""
        servable = self.resolve(name, version)
        return self.run_signature(servable, servable.signature(signature_name), inputs)

    def run_signature(
        self, servable: Servable, sig: SignatureInfo, inputs: Mapping[str, Any]
    ) -> dict[str, np.ndarray]:
        """``run`` for a servable and signature already resolved (the TFS JSON API resolves first)."""
        arrays = servable.prepare_inputs(sig.name, inputs)
        if self.settings.enable_batching and _batchable(sig, arrays):
            # A full queue pushes back on the caller instead of refusing: in a batch job a
            # refused request is lost work, and the HTTP layer bounds waiting time itself.
            future = self._batcher(servable, sig).submit(arrays, block=True)
            return future.result()
        return servable.run_prepared(sig.name, arrays)

    def _batcher(self, servable: Servable, sig: SignatureInfo) -> DynamicBatcher:
        key = (servable.name, servable.version, sig.name)
        batcher = self._batchers.get(key)
        if batcher is not None:
            return batcher
        with self._lock:
            if self._closed:
                raise errors.Unavailable("model server is closed")
            batcher = self._batchers.get(key)
            if batcher is None:
                s = self.settings
                sig_name = sig.name
                batcher = DynamicBatcher(
                    lambda arrays: servable.run_prepared(sig_name, arrays),
                    max_batch_size=s.max_batch_size,
                    timeout_s=s.batch_timeout_s,
                    max_queued_rows=s.max_queued_rows,
                    num_threads=s.num_batch_threads,
                    name=f"{servable.name}/{servable.version}/{sig_name}",
                    idle_dispatch=s.batch_idle_dispatch,
                )
                self._batchers[key] = batcher
            return batcher

    def batcher_stats(self) -> dict[str, dict[str, Any]]:
        """Stats of every batcher created so far, keyed "model/version/signature"."""
        return {b.name: b.stats for b in list(self._batchers.values())}

    def close(self) -> None:
        """Drain and stop every batcher; later batched requests get Unavailable."""
        with self._lock:
            self._closed = True
            batchers = list(self._batchers.values())
        for b in batchers:
            b.close(wait=True)

    def __enter__(self) -> ModelServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _batchable(sig: SignatureInfo, arrays: Mapping[str, np.ndarray]) -> bool:
    """Rows can be coalesced only if every input and output has a free leading batch dim."""
    for info in (*sig.inputs.values(), *sig.outputs.values()):
        if info.shape is None or not info.shape or info.shape[0] is not None:
            return False
    sizes = {a.shape[0] for a in arrays.values() if a.ndim}
    return len(sizes) == 1 and all(a.ndim for a in arrays.values()) and sizes != {0}
