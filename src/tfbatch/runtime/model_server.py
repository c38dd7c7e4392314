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
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from tfbatch import errors
from tfbatch.batching import DynamicBatcher, cooperative
from tfbatch.batching.batcher import check_request, group_key
from tfbatch.runtime.servable import Servable
from tfbatch.runtime.settings import RuntimeSettings
from tfbatch.runtime.signature import SignatureInfo
from tfbatch.runtime.threads import configure_threads
from tfbatch.runtime.versions import AVAILABLE, END, LOADING, UNLOADING, scan_versions

log = logging.getLogger(__name__)


class ModelServer:
    """Loads ``{name: {version: path}}`` eagerly; thread-safe for concurrent requests.

    Versions can change while serving (:meth:`poll_versions`, driven by a thread when
    ``settings.model_poll_interval_s`` > 0 and a model's base folder is known): a new version
    is loaded and warmed up before it is published, and only then are versions the policy no
    longer wants unloaded, so a request always finds a version to run on. The published map
    is replaced, never mutated, so lookups take no lock.
    """

    def __init__(
        self,
        models: Mapping[str, Mapping[int, str | Path]],
        settings: RuntimeSettings | None = None,
        default_model: str | None = None,
        *,
        base_paths: Mapping[str, str | Path] | None = None,
        warmup: Callable[[Servable, int], None] | None = None,
    ):
        self.settings = settings or RuntimeSettings()
        if not models:
            raise errors.ArtifactError("no models to serve")
        configure_threads(self.settings)
        self._published = _Published()
        self._states: dict[str, dict[int, tuple[str, str]]] = {}
        self._base_paths = {name: Path(p) for name, p in (base_paths or {}).items()}
        self._warmup = warmup
        self._batchers: dict[tuple[str, int, str], DynamicBatcher] = {}
        self._lock = threading.Lock()
        self._reload_lock = threading.Lock()
        self._closed = False
        self._stop_polling = threading.Event()
        self._poller: threading.Thread | None = None
        policy = self.settings.version_policy
        try:
            for name in sorted(models):
                versions = {int(v): Path(p) for v, p in models[name].items()}
                wanted = policy.select(versions) if policy else set(versions)
                if not wanted:
                    raise errors.ArtifactError(
                        f"model {name!r} has no versions"
                        + (f" that version policy {policy} selects (found {sorted(versions)})" if versions else "")
                    )
                self._servables = {**self._servables, name: {}}
                self._states[name] = {}
                for v in sorted(wanted):
                    self._load(name, v, versions[v], initial=True)
        except BaseException:
            self.close()
            raise
        default = default_model or self.settings.default_model_name
        if default is not None and default not in self._servables:
            raise errors.NotFound(
                f"default model {default!r} not found; available models: {', '.join(self.model_names())}"
            )
        self.default_model = default or self.model_names()[0]
        if self.settings.model_poll_interval_s > 0 and self._base_paths:
            self._poller = threading.Thread(target=self._poll_loop, name="tfbatch-version-poll", daemon=True)
            self._poller.start()

    @property
    def _servables(self) -> dict[str, dict[int, Servable]]:
        return self._published.servables

    @_servables.setter
    def _servables(self, value: dict[str, dict[int, Servable]]) -> None:
        # Held in a shared box so that unbatched() views see versions published later.
        self._published.servables = value

    @classmethod
    def from_artifact(
        cls, artifact: Any, settings: RuntimeSettings | None = None,
        warmup: Callable[[Servable, int], None] | None = None,
    ) -> ModelServer:
        """From the artifact subsystem's object: ``artifact.models[name].versions`` ({version: path})
        and ``artifact.default_model_name``."""
        models = {name: dict(m.versions) for name, m in artifact.models.items()}
        default = getattr(artifact, "default_model_name", None)
        if settings is not None and settings.default_model_name:
            default = settings.default_model_name
        # A model's base folder is where its numeric version folders sit: hot reload watches it.
        # A SavedModel given as the artifact root itself has no such folder and is not watched.
        bases = {
            name: Path(path).parent
            for name, versions in models.items()
            for version, path in versions.items()
            if Path(path).name.isdigit() and int(Path(path).name) == int(version)
        }
        return cls(models, settings=settings, default_model=default, base_paths=bases, warmup=warmup)

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
        if not versions:
            raise errors.Unavailable(f"model {name!r} has no version available (see its status)")
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

    # ---- versions ----------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Every model has a loaded, warmed-up version and the server is open (for readiness probes)."""
        return not self._closed and all(self._servables.get(name) for name in self._states)

    def model_status(self, name: str | None = None) -> dict[int, tuple[str, str]]:
        """``{version: (state, error message)}`` for every version this server has seen of a model,
        unloaded ones included (state END), as TF Serving's GetModelStatus reports them."""
        name = name or self.default_model
        with self._lock:
            states = self._states.get(name)
            if states is None:
                raise errors.NotFound(f"model {name!r} not found; available models: {', '.join(self.model_names())}")
            return dict(states)

    def _set_state(self, name: str, version: int, state: str, error: str = "") -> None:
        with self._lock:
            self._states[name][version] = (state, error)

    def _load(self, name: str, version: int, path: Path, initial: bool = False) -> None:
        """Load and warm up one version, then publish it. A failure at start-up is raised;
        later (hot reload) it is logged and kept in the version's status."""
        self._set_state(name, version, LOADING)
        try:
            servable = Servable.load(name, version, path)
            if self._warmup is not None and self.settings.warmup_replays > 0:
                self._warmup(servable, self.settings.warmup_replays)
        except Exception as exc:
            self._set_state(name, version, END, str(exc))
            if initial:
                raise
            log.error("model %s version %s was not loaded: %s", name, version, exc)
            return
        with self._lock:
            self._servables = {**self._servables, name: {**self._servables[name], version: servable}}
            self._states[name][version] = (AVAILABLE, "")
        log.info("model %s version %s is available", name, version)

    def _unload(self, name: str, version: int) -> None:
        """Unpublish a version, then drain its batchers; requests already on it finish."""
        with self._lock:
            versions = dict(self._servables[name])
            servable = versions.pop(version)
            self._servables = {**self._servables, name: versions}
            self._states[name][version] = (UNLOADING, "")
            servable.retired = True
            keys = [k for k in self._batchers if k[:2] == (name, version)]
            batchers = [self._batchers.pop(k) for k in keys]
        for b in batchers:
            b.close(wait=True)
        self._set_state(name, version, END)
        log.info("model %s version %s is unloaded", name, version)

    def poll_versions(self) -> None:
        """Scan each model's base folder once; load what the policy now wants, then unload the rest.

        Without a configured policy, the newest version found is added and nothing is unloaded
        unless its folder is gone (the artifact's versions are all served, COMPAT.md §1). A
        version that failed to load is not retried until the server restarts.
        """
        policy = self.settings.version_policy
        with self._reload_lock:
            for name, base in sorted(self._base_paths.items()):
                if self._closed or name not in self._states:
                    continue
                found = scan_versions(base)
                wanted = policy.select(found) if policy else set(found)
                loaded = set(self._servables[name])
                failed = {v for v, (state, err) in self.model_status(name).items() if state == END and err}
                for v in sorted(wanted - loaded - failed):
                    self._load(name, v, found[v])
                for v in sorted(loaded - wanted):
                    # Availability first: keep the last version if nothing newer came up.
                    if len(self._servables[name]) > 1 or v not in found:
                        self._unload(name, v)

    def _poll_loop(self) -> None:
        while not self._stop_polling.wait(self.settings.model_poll_interval_s):
            try:
                self.poll_versions()
            except Exception:  # noqa: BLE001 - a bad scan must not end hot reload for good
                log.exception("scanning model folders for new versions failed")

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
        batcher = self._batcher(servable, sig) if self.settings.enable_batching and _batchable(sig, arrays) else None
        if batcher is not None:
            if cooperative.inside():
                # A single handler's call in its hop's greenlet: the hop's calls go to the
                # batcher as one request, once each of them waits for the model.
                arrays, _ = check_request(arrays, batcher.name)
                return cooperative.gathered((batcher, group_key(arrays)), arrays,
                                            lambda gathered: _submit_together(batcher, servable, sig.name, gathered))
            return _submit(batcher, servable, sig.name, arrays).result()
        return servable.run_prepared(sig.name, arrays)

    def _batcher(self, servable: Servable, sig: SignatureInfo) -> DynamicBatcher | None:
        """The batcher of a servable's signature; None once the servable is unloaded."""
        key = (servable.name, servable.version, sig.name)
        batcher = self._batchers.get(key)
        if batcher is not None:
            return batcher
        with self._lock:
            if self._closed:
                raise errors.Unavailable("model server is closed")
            if servable.retired:
                return None
            batcher = self._batchers.get(key)
            if batcher is None:
                s = self.settings
                sig_name = sig.name
                run = _padded(servable, sig_name, s.allowed_batch_sizes)
                batcher = DynamicBatcher(
                    run,
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
        """Stop polling, drain and stop every batcher; later batched requests get Unavailable."""
        self._stop_polling.set()
        if self._poller is not None and self._poller is not threading.current_thread():
            self._poller.join()
        with self._lock:
            self._closed = True
            batchers = list(self._batchers.values())
        for b in batchers:
            b.close(wait=True)

    def __enter__(self) -> ModelServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Published:
    servables: dict[str, dict[int, Servable]]

    def __init__(self) -> None:
        self.servables = {}


def _padded(servable: Servable, sig_name: str, sizes: tuple[int, ...]) -> Callable:
    """The batch function; with ``sizes``, a batch is padded with copies of its first row up to
    the next allowed size (TF Serving's way) and the outputs cut back to the real rows."""

    def run(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return servable.run_prepared(sig_name, arrays)

    if not sizes:
        return run

    def padded(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = next(iter(arrays.values())).shape[0]
        target = next((s for s in sizes if s >= rows), rows)
        if target == rows:
            return run(arrays)
        index = np.concatenate([np.arange(rows), np.zeros(target - rows, dtype=np.intp)])
        outputs = run({k: a[index] for k, a in arrays.items()})
        return {k: v[:rows] for k, v in outputs.items()}

    return padded


def _batchable(sig: SignatureInfo, arrays: Mapping[str, np.ndarray]) -> bool:
    """Rows can be coalesced only if every input and output has a free leading batch dim."""
    for info in (*sig.inputs.values(), *sig.outputs.values()):
        if info.shape is None or not info.shape or info.shape[0] is not None:
            return False
    sizes = {a.shape[0] for a in arrays.values() if a.ndim}
    return len(sizes) == 1 and all(a.ndim for a in arrays.values()) and sizes != {0}


def _submit(batcher: DynamicBatcher, servable: Servable, sig_name: str, inputs: dict[str, np.ndarray]) -> Future:
    """The batcher's future for a request. A full queue pushes back on the caller instead of
    refusing: in a batch job a refused request is lost work, and the HTTP layer bounds waiting
    time itself. A version unloaded between lookup and submit is still in memory: it runs the
    request unbatched, its outputs (or its error) in the future."""
    try:
        return batcher.submit(inputs, block=True)
    except errors.Unavailable:
        if not servable.retired:
            raise
    future: Future = Future()
    try:
        future.set_result(servable.run_prepared(sig_name, inputs))
    except Exception as exc:  # noqa: BLE001 - the caller's result() raises it
        future.set_exception(exc)
    return future


def _submit_together(batcher: DynamicBatcher, servable: Servable, sig_name: str,
                     gathered: list[dict[str, np.ndarray]]) -> Future:
    """One batcher request for the inputs of a hop's calls (``cooperative.gathered``; each a
    checked request of the same group): a future of each call's outputs, in order, its rows
    of the request's outputs. As ``run_signature`` does for one call, a full queue makes the
    hop wait, and a version unloaded since its lookup runs unbatched (``_submit``)."""
    rows = [next(iter(arrays.values())).shape[0] for arrays in gathered]
    inputs = gathered[0] if len(gathered) == 1 else {
        key: np.concatenate([arrays[key] for arrays in gathered]) for key in gathered[0]}
    future = _submit(batcher, servable, sig_name, inputs)
    split: Future = Future()

    def deliver(done: Future) -> None:
        try:
            outputs = done.result()
        except BaseException as exc:  # noqa: BLE001 - each gathered call raises it
            split.set_exception(exc)
            return
        pieces, start = [], 0
        for count in rows:
            pieces.append({key: value[start:start + count] for key, value in outputs.items()})
            start += count
        split.set_result(pieces)

    future.add_done_callback(deliver)
    return split
