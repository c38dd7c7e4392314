"""Find the models, versions and user code inside an artifact (COMPAT.md §1).

Layout rules, applied in this order to the artifact root:

1. The root holds numeric version dirs (``1/saved_model.pb``): one model named ``model``.
2. The root is itself a SavedModel (``saved_model.pb`` directly in it): model ``model``, version 1.
3. Otherwise every directory below the root (except ``code/``) that holds numeric version
   dirs is a model named after that directory, at any depth (``export/Servo/<v>`` -> ``Servo``),
   like the SageMaker TFS container, which names a model after its version dir's parent.

Directories are visited in sorted order so the result never depends on the filesystem.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tfbatch.errors import ArtifactError, DependencyMissing, NotFound, UnsafeArchive
from tfbatch.artifact.extract import _parts, safe_extract

DEFAULT_MODEL_ENV = "SAGEMAKER_TFS_DEFAULT_MODEL_NAME"
SINGLE_MODEL_NAME = "model"
SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
EXPECTED_LAYOUT = (
    "expected '<version>/saved_model.pb' (version = digits, e.g. 1/saved_model.pb), "
    "'<model name>/<version>/saved_model.pb' for several models, "
    "or a SavedModel directory with saved_model.pb at its root"
)
# Folders that archiving tools add and that never hold models.
_IGNORED_DIRS = {"__MACOSX", "__pycache__"}


def is_saved_model_dir(path: Path) -> bool:
    return any((path / f).is_file() for f in SAVED_MODEL_FILES)


def _subdirs(path: Path) -> list[Path]:
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return []
    return [
        Path(e.path)
        for e in entries
        if e.is_dir() and not e.name.startswith(".") and e.name not in _IGNORED_DIRS
    ]


def find_versions(path: Path) -> dict[int, Path]:
    """Numeric version dirs holding a SavedModel, ascending. Two spellings of one number
    ("1" and "001") would make the served model ambiguous, so they are refused."""
    found: dict[int, Path] = {}
    for d in _subdirs(path):
        if d.name.isdigit() and d.name.isascii() and is_saved_model_dir(d):
            v = int(d.name)
            if v in found:
                raise ArtifactError(
                    f"model directory '{path}' has two directories for version {v}: "
                    f"'{found[v].name}' and '{d.name}'"
                )
            found[v] = d
    return dict(sorted(found.items()))


@dataclass
class ModelEntry:
    name: str
    versions: dict[int, Path]

    @property
    def latest(self) -> int:
        return max(self.versions)

    def path(self, version: int | None = None) -> Path:
        """The SavedModel folder of ``version`` (None: the latest)."""
        if version is None:
            return self.versions[self.latest]
        try:
            return self.versions[int(version)]
        except (KeyError, ValueError, TypeError):
            available = ", ".join(str(v) for v in self.versions)
            raise NotFound(
                f"model '{self.name}' has no version {version!r}; available versions: {available}"
            ) from None


@dataclass
class Artifact:
    root: Path
    models: dict[str, ModelEntry]
    code_dir: Path | None = None
    inference_script: Path | None = None
    requirements: Path | None = None
    lib_dir: Path | None = None
    # Set when open_artifact created the folder, so callers may delete it when done.
    temporary: bool = field(default=False, repr=False)

    def cleanup(self) -> None:
        """Delete the folder open_artifact extracted into; a no-op for folders it did not create."""
        if self.temporary:
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def default_model_name(self) -> str:
        wanted = os.environ.get(DEFAULT_MODEL_ENV)
        if wanted:
            if wanted not in self.models:
                raise ArtifactError(
                    f"{DEFAULT_MODEL_ENV}={wanted!r} names no model in '{self.root}'; "
                    f"available models: {', '.join(self.models)}"
                )
            return wanted
        return next(iter(self.models))

    def model(self, name: str | None = None) -> ModelEntry:
        """The named model, or the default one when ``name`` is None."""
        if name is None:
            name = self.default_model_name
        try:
            return self.models[name]
        except KeyError:
            raise NotFound(
                f"no model named {name!r} in '{self.root}'; available models: {', '.join(self.models)}"
            ) from None


def _find_nested(root: Path) -> tuple[dict[str, ModelEntry], list[Path]]:
    """Models anywhere below ``root``; also bare SavedModel dirs seen (for the error hint)."""
    models: dict[str, ModelEntry] = {}
    bare: list[Path] = []
    seen: set[str] = set()
    # Explicit stack instead of recursion; reversed so that pops come out in sorted order.
    stack = [d for d in reversed(_subdirs(root)) if d.name != "code"]
    while stack:
        d = stack.pop()
        real = os.path.realpath(d)
        if real in seen:  # a symlinked folder visited twice, or a link loop
            continue
        seen.add(real)
        versions = find_versions(d)
        if versions:
            if d.name in models:
                raise ArtifactError(
                    f"two models named '{d.name}' in '{root}': "
                    f"'{models[d.name].path().parent.relative_to(root)}' and '{d.relative_to(root)}'; "
                    "model names come from the folder holding the version directories, rename one"
                )
            models[d.name] = ModelEntry(d.name, versions)
            continue
        if is_saved_model_dir(d):
            bare.append(d)
            continue
        stack.extend(reversed(_subdirs(d)))
    return dict(sorted(models.items())), bare


def discover(root: str | os.PathLike) -> Artifact:
    """Apply the layout rules to the directory ``root``."""
    root = Path(root)
    if not root.is_dir():
        raise ArtifactError(f"model artifact '{root}' is not a directory; {EXPECTED_LAYOUT}")
    versions = find_versions(root)
    if versions:
        models = {SINGLE_MODEL_NAME: ModelEntry(SINGLE_MODEL_NAME, versions)}
    elif is_saved_model_dir(root):
        models = {SINGLE_MODEL_NAME: ModelEntry(SINGLE_MODEL_NAME, {1: root})}
    else:
        models, bare = _find_nested(root)
        if not models:
            hint = ""
            if bare:
                listed = ", ".join(f"'{b.relative_to(root)}'" for b in bare[:5])
                hint = f"; found SavedModel folder(s) {listed} not inside a numeric version directory"
            raise ArtifactError(f"no model found in '{root}': {EXPECTED_LAYOUT}{hint}")
    code = root / "code"
    code_dir = code if code.is_dir() else None

    def _opt(p: Path, want_dir: bool) -> Path | None:
        if code_dir is None:
            return None
        return p if (p.is_dir() if want_dir else p.is_file()) else None

    return Artifact(
        root=root,
        models=models,
        code_dir=code_dir,
        inference_script=_opt(code / "inference.py", False),
        requirements=_opt(code / "requirements.txt", False),
        lib_dir=_opt(code / "lib", True),
    )


def _fs_for(uri: str):
    import fsspec

    try:
        return fsspec.core.url_to_fs(uri)
    except ImportError as exc:
        extra = " (pip install tfbatch[s3])" if uri.startswith(("s3://", "s3a://")) else ""
        raise DependencyMissing(f"cannot open '{uri}': {exc}{extra}") from None


def _download_prefix(fs, prefix: str, uri: str, dest: Path) -> None:
    """Copy every object under ``prefix`` into ``dest``, refusing keys that would escape it."""
    prefix = prefix.rstrip("/")
    files = sorted(fs.find(prefix))
    if not files:
        raise ArtifactError(f"model artifact '{uri}' is empty: no objects under that prefix")
    root = str(dest.resolve())
    for remote in files:
        rel = remote[len(prefix):].lstrip("/") if remote.startswith(prefix) else None
        parts = [p for p in (rel or "").split("/") if p not in ("", ".")]
        local = os.path.normpath(os.path.join(root, *parts)) if parts else root
        if not parts or ".." in parts or not local.startswith(root + os.sep):
            raise UnsafeArchive(f"model artifact '{uri}': refusing object '{remote}': it would land outside {root}")
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(remote, local)


def _open_remote(uri: str, dest: Path) -> None:
    fs, path = _fs_for(uri)
    try:
        if fs.isdir(path):
            _download_prefix(fs, path, uri, dest)
            return
        if not fs.isfile(path):
            raise ArtifactError(f"model artifact '{uri}' does not exist")
        fd, tmp = tempfile.mkstemp(prefix="tfbatch-download-", suffix=".tar.gz")
        os.close(fd)
        try:
            fs.get_file(path, tmp)
            safe_extract(tmp, dest)
        finally:
            os.unlink(tmp)
    except OSError as exc:  # network, permission and not-found errors from the filesystem
        raise ArtifactError(f"cannot read model artifact '{uri}': {type(exc).__name__}: {exc}") from None


def _local_path(uri: str | os.PathLike) -> Path | None:
    """The local path ``uri`` names, or None for a remote URI."""
    if isinstance(uri, os.PathLike):
        return Path(uri)
    if uri.startswith("file://"):
        return Path(uri[len("file://"):])
    if "://" in uri:
        return None
    return Path(uri)


# ``read_inference_script`` reads an archive only up to these sizes: it must answer quicker
# than extracting the model would take, and a script is a few KB. It stops after the members
# before the script hold ``SCRIPT_SCAN_MAX_BYTES`` (a compression bomb inflates far beyond
# its file) or ``SCRIPT_SCAN_MAX_MEMBERS`` of them.
SCRIPT_ARCHIVE_MAX_BYTES = 64 << 20
SCRIPT_MAX_BYTES = 1 << 20
SCRIPT_SCAN_MAX_BYTES = 256 << 20
SCRIPT_SCAN_MAX_MEMBERS = 10_000


def read_inference_script(uri: str | os.PathLike) -> bytes | None:
    """The artifact's ``code/inference.py``, where it can be had without extracting or
    downloading the model: from a local folder, or from a local archive of at most
    ``SCRIPT_ARCHIVE_MAX_BYTES`` (its members streamed until the script, which is read if
    it is a regular file of at most ``SCRIPT_MAX_BYTES``). None where there is no script,
    the artifact is remote or larger, or it cannot be read (opening it says why)."""
    import tarfile

    local = _local_path(uri)
    if local is None:
        return None
    try:
        if local.is_dir():
            script = local / "code" / "inference.py"
            if not script.is_file() or script.stat().st_size > SCRIPT_MAX_BYTES:
                return None
            return script.read_bytes()
        if not local.is_file() or local.stat().st_size > SCRIPT_ARCHIVE_MAX_BYTES:
            return None
        scanned = 0
        with tarfile.open(local, "r|*") as tar:
            for count, member in enumerate(tar, 1):
                if _parts(member.name) == ["code", "inference.py"]:
                    if not member.isfile() or member.size > SCRIPT_MAX_BYTES:
                        return None
                    f = tar.extractfile(member)
                    return f.read(SCRIPT_MAX_BYTES) if f is not None else None
                scanned += max(member.size, 0)  # the stream reads through it to the next header
                if scanned > SCRIPT_SCAN_MAX_BYTES or count >= SCRIPT_SCAN_MAX_MEMBERS:
                    return None
    except (OSError, tarfile.TarError, EOFError, ValueError):
        return None
    return None


TEMP_PREFIX = "tfbatch-model-"


def _host() -> str:
    """This machine's name, as it may stand in a folder name."""
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64] or "host"


def _temp_prefix() -> str:
    """A temporary artifact folder's name says which process on which machine made it:
    ``tfbatch-model-<host>-<pid>-<random>``, so that a later job can delete it once that
    process is gone (:func:`sweep_orphans`)."""
    return f"{TEMP_PREFIX}{_host()}-{os.getpid()}-"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: another user's process
        return True
    return True


def sweep_orphans(folder: str | os.PathLike | None = None) -> list[Path]:
    """Delete the temporary artifact folders in ``folder`` (the temporary directory) whose
    process, on this machine, is no longer running: a job killed (SIGKILL, OOM) before its
    cleanup had left its extracted model there, as large as the model, for good. Folders of
    another machine (a shared /tmp) or of a live process are left alone. Returns those deleted."""
    root = Path(folder if folder is not None else tempfile.gettempdir())
    mine = f"{TEMP_PREFIX}{_host()}-"
    gone: list[Path] = []
    try:
        names = [entry.name for entry in os.scandir(root) if entry.name.startswith(mine)]
    except OSError:
        return gone
    for name in names:
        pid = name[len(mine):].split("-", 1)[0]
        if not pid.isdigit() or _running(int(pid)):
            continue
        path = root / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            gone.append(path)
    return gone


def open_artifact(uri: str | os.PathLike, workdir: str | os.PathLike | None = None) -> Artifact:
    """Open a model artifact: a local directory (used in place), a local archive, or any
    fsspec URI to an archive or a directory prefix (downloaded). Archives and remote
    contents go into ``workdir`` (default: a fresh temporary folder)."""
    local = _local_path(uri)
    if local is not None and local.is_dir():
        return discover(local)
    if local is not None and not local.exists():
        raise ArtifactError(f"model artifact '{uri}' does not exist; {EXPECTED_LAYOUT}")

    created = workdir is None
    if created:
        sweep_orphans()
    dest = Path(tempfile.mkdtemp(prefix=_temp_prefix())) if created else Path(workdir)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if local is not None:
            safe_extract(local, dest)
        else:
            _open_remote(str(uri), dest)
        art = discover(dest)
    except BaseException:
        if created:
            shutil.rmtree(dest, ignore_errors=True)
        raise
    art.temporary = created
    return art
