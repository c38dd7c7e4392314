"""The API server's settings: where it listens, where its state lives, what runs its jobs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tfbatch.errors import ConfigError

# AWS's placeholder account: ARNs need twelve digits, and no real account is involved.
DEFAULT_ACCOUNT = "000000000000"


@dataclass
class ApiConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    state_dir: Path = field(default_factory=lambda: Path(".tfbatch-api"))
    engine: str = "local"
    ray_address: str | None = None
    # Jobs running at once; more wait InProgress in the queue (SageMaker also queues them).
    max_concurrent_jobs: int = 2
    # Jobs InProgress or Stopping (running or queued) at most; one more is ResourceLimitExceeded,
    # as AWS answers past an account's transform job quota.
    max_jobs_in_progress: int = 100
    region: str = "us-east-1"
    account_id: str = DEFAULT_ACCOUNT
    # (access key id, secret) pairs accepted for SigV4; empty: the server's own credentials.
    credentials: list[tuple[str, str]] = field(default_factory=list)
    # Largest request body read, before parsing (InvokeEndpoint's own limit is 6 MB: AWS's).
    max_body_bytes: int = 6 * 1024 * 1024 + 64 * 1024

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir)
        if self.engine not in ("local", "ray"):
            raise ConfigError(f"--engine must be local or ray, got {self.engine!r}")
        if self.max_concurrent_jobs < 1:
            raise ConfigError(f"--max-concurrent-jobs must be at least 1, got {self.max_concurrent_jobs}")
        if self.max_jobs_in_progress < 1:
            raise ConfigError(f"--max-jobs-in-progress must be at least 1, got {self.max_jobs_in_progress}")
        if not (len(self.account_id) == 12 and self.account_id.isdigit()):
            raise ConfigError(f"account id must be 12 digits, got {self.account_id!r}")

    def accepted_credentials(self) -> dict[str, str]:
        """access key id -> secret; by default the server's own, through botocore's chain."""
        if self.credentials:
            return dict(self.credentials)
        import botocore.session

        creds = botocore.session.get_session().get_credentials()
        if creds is None:
            raise ConfigError(
                "tfbatch api verifies AWS SigV4 signatures, but found no AWS credentials to verify them "
                "against: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or a profile) for the server")
        frozen = creds.get_frozen_credentials()
        return {frozen.access_key: frozen.secret_key}

    @classmethod
    def region_from_env(cls) -> str:
        return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
