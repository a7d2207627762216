"""One typed settings object shared by the API, the workers, the CLI and the migrations.

Every field reads an environment variable of the same name with the ``PERFBISECT_`` prefix,
except the two that switch the deployment: ``DATABASE_URL`` and ``REDIS_URL``. With neither
set, perfbisect runs embedded: SQLite in ``var/`` and the Celery tasks executed in-process.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_HOME = Path("var")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PERFBISECT_", extra="ignore")

    environment: Literal["development", "testing", "production"] = "development"
    home: Path = Field(default=DEFAULT_HOME, description="mirrors, worktrees, SQLite file, logs")
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("DATABASE_URL", "PERFBISECT_DATABASE_URL")
    )
    redis_url: str | None = Field(
        default=None, validation_alias=AliasChoices("REDIS_URL", "PERFBISECT_REDIS_URL")
    )
    # Bisect limits and defaults.
    max_range: int = 2000
    default_min_effect: float = 0.02
    default_workers: int = 1
    max_trials_per_revision: int = 12
    # Worker behaviour.
    build_timeout_s: int = 900
    build_ccache: bool = Field(default=True, description="incremental builds (a build command that names "
                               "{build_tree}) compile through ccache, one cache per repository and toolchain")
    build_ccache_max_mb: int = Field(default=5120, ge=64, description="the size past which ccache evicts")
    build_ccache_min_free_mb: int = Field(default=512, ge=0, description="free disk below which builds run "
                                          "without ccache (a warning says so)")
    trial_timeout_s: int = 900
    gpu_caches: str | None = Field(default=None, description="the cache levels a GPU worker's cold flush covers, "
                                   "e.g. L2=4MiB*8,MALL=256MiB (default: detected; kernels/harness/devices.py)")
    visibility_timeout_s: int = 3600
    embedded_workers: int = Field(default=1, ge=1, le=64, description="trials run at once without a broker")
    # Serving: processes; per process, the database connections (requests doing database work at
    # once) and the requests in flight past which new ones are answered 503 + Retry-After. Every
    # request in flight gets a thread (api.backpressure.size_thread_pool), so the connections, not
    # the threads, bound the database work.
    web_workers: int | None = Field(default=None, ge=1, le=64, description="default: 1 embedded, else the cores")
    db_pool_size: int = Field(default=16, ge=1, le=256, validation_alias=AliasChoices(
        "PERFBISECT_DB_POOL_SIZE", "PERFBISECT_WEB_THREADS"), description="pooled connections per process (+4 overflow)")
    max_in_flight: int = Field(default=64, ge=1, le=10_000)
    db_pool_timeout_s: float = Field(default=10.0, gt=0)
    trial_launcher: Literal["auto", "fork-server", "subprocess"] = Field(
        default="auto", description="workers: trials are contained either way (sandbox user, limits, deadline, "
        "cancel); auto forks them from a contained fork server that has imported torch, or runs a subprocess when "
        "it cannot (the repository shadows torch/triton, no fork); fork-server never falls back; subprocess always "
        "starts a fresh interpreter")
    trial_preload: Literal["auto", "on", "off"] = Field(
        default="auto", description="workers: auto forks the trials of a suite that declares PRELOAD from a fork "
        "server of their revision that has imported those modules from its worktree once; on also preloads each "
        "case's target package; off preloads nothing (every trial imports the library itself)")
    trial_cache_keep: int = Field(default=64, ge=1, description="revisions whose JIT caches a sandbox slot keeps")
    build_cache_keep: int = Field(default=32, ge=1, description="build outputs (of repositories that declare their "
                                  "build inputs) a worker keeps under HOME/build-cache")
    # Containment of repository code (workers/sandbox.py). As root, builds and trials run as this
    # user ("" keeps root: only for a worker that is itself an unprivileged account).
    sandbox_user: str = "nobody"
    sandbox_dir: Path | None = Field(default=None, description="slots for trials; default HOME/sandbox, must be "
                                     "traversable by the sandbox user")
    trial_memory_mb: int | None = Field(default=None, ge=0, description="a slot's memory budget: /tmp and "
                                        "/dev/shm an eighth each (at most 1 GiB), the rest each process's address space "
                                        "(CPU) or data (GPU) cap; 0 = none; default: 85% of the host's memory / sandbox_slots")
    sandbox_slots: int | None = Field(default=None, ge=1, description="trials this host runs at once (the memory "
                                      "cap's divisor); default: its GPUs, else its cores")
    # Namespaces (kernels/harness/contain/bwrap.py): auto uses bubblewrap where the host allows it and says
    # loudly when it does not; required refuses to run repository code without (production's
    # auto is required); off is today's containment only (uid, limits, tree kill).
    sandbox_namespaces: Literal["auto", "required", "off"] = "auto"
    sandbox_uid_base: int = Field(default=200_000, ge=0, description="as root, slot N runs as uid base+N (group of "
                                  "the sandbox user), so no slot can signal another; 0: every slot is the sandbox user")
    sandbox_max_procs: int = Field(default=1024, ge=0, description="processes and threads of one slot (RLIMIT_NPROC "
                                   "of its uid; needs sandbox_uid_base); 0 = none")
    sandbox_cgroup_dir: Path | None = Field(default=None, description="a cgroup v2 directory delegated to the "
                                            "worker: slot N gets slot-N in it with memory.max, pids.max and "
                                            "cpuset.cpus; unset: rlimits only (workers/cgroups.py)")
    build_network_repos: str = Field(default="", description="comma-separated repositories whose builds may use the "
                                     "network (to download); trials never can")
    max_file_mb: int = Field(default=16384, ge=0, description="largest file a build or trial may write; 0 = none")
    # Self-healing (service/trials/reconcile.py): a running trial whose worker stopped beating
    # for heartbeat_timeout_s is run again; a pending one whose message is gone is re-sent. A
    # SIGKILLed worker's trial is back in the queue within timeout + one interval (<= 25 s): four
    # missed beats, so a worker that is merely slow for a moment is not taken for dead.
    heartbeat_s: float = Field(default=5.0, gt=0)
    heartbeat_timeout_s: int = Field(default=20, ge=5)
    redispatch_after_s: int = Field(default=30, ge=1)
    reconcile_interval_s: float = Field(default=5.0, gt=0)
    unsteady_pause_s: int = Field(default=15, ge=0, description="a job whose control is too unsteady for its minimum "
                                  "effect pauses this long before its next round, then twice and four times as "
                                  "long, then measures on (service/bisect/steadiness.py); 0: never pause")
    cancel_poll_s: float = Field(default=1.0, gt=0, description="how often a running trial checks for a cancel")
    store_retry_s: int = Field(default=900, ge=0, description="how long a worker keeps retrying to store a result")
    samples_retention_days: int = Field(default=180, ge=0, description="raw samples of trials finished longer ago "
                                        "(of finished jobs) are deleted; the summaries are kept forever; 0 keeps them")
    # GitHub PR bot; no token means comments are rendered but not posted.
    github_token: str | None = None
    github_api_url: str = "https://api.github.com"
    # The webhook endpoint is off (404) unless this is set; deliveries must be signed with it.
    # Where the dashboard is reachable from outside (links of the PR check; None: no links).
    public_url: str | None = None
    webhook_secret: str | None = None
    # Access (README "Deployment"): writes always need a token; reads need one unless public.
    public_reads: bool = Field(default=True, description="anonymous GETs of jobs, reports and history")
    local_repo_roots: str = Field(default="", description="os.pathsep-separated directories under which "
                                  "local-path repositories may be registered; empty: none")
    outbound_allow: str = Field(default="", description="comma-separated host names, addresses or networks "
                                "(10.0.0.0/8) that notification targets and repository URLs may reach although "
                                "they resolve to loopback, link-local or private addresses; empty: none "
                                "(service/outbound.py)")
    # Limits on callers (README "Deployment", "Limits"): bodies are refused past these sizes before
    # they are read (413); requests per token and bad-token attempts per client address are rate
    # limited (429 + Retry-After; `limits` syntax such as "600/minute", "" = none); a token may have
    # this many open jobs and pending or running trials (429).
    max_body_bytes: int = Field(default=2**20, ge=1024, description="largest API request body")
    webhook_max_body_bytes: int = Field(default=25 * 2**20, ge=1024, description="largest webhook delivery "
                                        "(GitHub sends at most 25 MiB)")
    token_rate_limit: str = Field(default="600/minute", description="requests per token")
    bad_token_rate_limit: str = Field(default="20/minute", description="requests with an unknown or revoked "
                                      "token per client address; past it, every token from there gets 429")
    max_open_jobs_per_token: int = Field(default=20, ge=0, description="queued and running jobs of one token; 0 = no cap")
    max_queued_trials_per_token: int = Field(default=2000, ge=0, description="pending and running trials of one "
                                             "token's jobs; 0 = no cap")
    # Git fetches run in a task (never in a request), one per remote at a time, killed past this.
    fetch_timeout_s: float = Field(default=120.0, gt=0, description="a git clone or fetch of a repository")
    mirror_fresh_s: float = Field(default=60.0, ge=0, description="a request resolves branch and tag names from a "
                                  "mirror fetched less than this long ago; else the job's task fetches first")
    # Input bounds that depend on the deployment.
    device_classes: str = Field(default="cpu,cuda", description="comma-separated device classes workers serve: cpu, "
                                "cuda (NVIDIA), rocm (AMD Instinct), or a GPU model any GPU worker may serve")
    max_case_gib: float = Field(default=64.0, gt=0, description="largest memory one built-in case may need")
    public_url: str | None = Field(default=None, description="where people reach the dashboard, for links in PR comments")

    # Notifications (service/notifications): email goes through this SMTP server; webhooks and
    # Slack need nothing here. A failed delivery is retried with exponential backoff.
    smtp_host: str | None = Field(default=None, description="SMTP server for email notifications; unset: email off")
    smtp_port: int = Field(default=25, ge=1, le=65535)
    smtp_user: str | None = None
    smtp_password: str | None = None
    smtp_starttls: bool = Field(default=False, description="STARTTLS before logging in")
    smtp_from: str = Field(default="perfbisect@localhost", description="the From address of notifications")
    notify_max_attempts: int = Field(default=6, ge=1, le=20, description="tries of one notification delivery")
    notify_backoff_s: float = Field(default=5.0, gt=0, description="first retry delay; doubles per try (max 10 min)")
    log_format: Literal["text", "json"] = Field(default="text", description="json: one JSON object per log line")

    @field_validator("token_rate_limit", "bad_token_rate_limit")
    @classmethod
    def _rate(cls, value: str) -> str:
        if value.strip():
            from limits import parse  # a typo fails at start, not on the first request

            parse(value)
        return value.strip()

    @model_validator(mode="after")
    def _refuse_placeholders_in_production(self) -> Settings:
        if self.environment == "production":
            if not self.database_url or self.database_url.startswith("sqlite"):
                raise ValueError("production needs DATABASE_URL pointing at PostgreSQL")
            if not self.redis_url:
                raise ValueError("production needs REDIS_URL (Celery workers)")
            # No secret leaves the webhook off; a placeholder would let anyone sign deliveries.
            if self.webhook_secret is not None and self.webhook_secret.strip() in ("", "changeme"):
                raise ValueError("PERFBISECT_WEBHOOK_SECRET is a placeholder: set a real secret or unset it")
        return self

    @property
    def embedded(self) -> bool:
        """No broker configured: tasks run in-process (Celery eager mode)."""
        return not self.redis_url

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            url = self.database_url
            # Accept the common postgres:// and postgresql:// spellings; drive them with psycopg 3.
            for prefix in ("postgres://", "postgresql://"):
                if url.startswith(prefix):
                    return "postgresql+psycopg://" + url[len(prefix) :]
            return url
        return f"sqlite:///{(self.home / 'perfbisect.sqlite').resolve()}"

    @property
    def served_device_classes(self) -> list[str]:
        return [name.strip() for name in self.device_classes.split(",") if name.strip()]

    @property
    def allowed_local_roots(self) -> list[Path]:
        return [Path(root).resolve() for root in self.local_repo_roots.split(os.pathsep) if root.strip()]

    @property
    def mirrors_dir(self) -> Path:
        return self.home / "mirrors"

    @property
    def worktrees_dir(self) -> Path:
        return self.home / "worktrees"


@lru_cache
def get_settings() -> Settings:
    return Settings()
