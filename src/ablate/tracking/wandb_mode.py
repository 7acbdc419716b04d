"""Which W&B mode a job runs in (online, offline, disabled), decided without prompting within about 3 s:
wandb 0.31 left to itself prompts for a key, raises, or blocks for minutes without network. The
configured or environment mode, else the credentials (env or netrc), else a TCP probe of the W&B
host (through the HTTPS proxy), made once per process."""

from __future__ import annotations

import functools
import netrc
import os
import socket
import threading
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

WANDB_MODES = ("online", "offline", "disabled")
# Spellings wandb itself accepts in WANDB_MODE.
_MODE_ALIASES = {"dryrun": "offline", "run": "online"}
PROBE_TIMEOUT_S = 3.0


def decide_wandb_mode(requested: str | None = None) -> tuple[str, str]:
    """``(mode, reason)``: ``requested`` (``logger.wandb.mode``) > ``WANDB_MODE`` > "offline" without
    credentials > "offline" when the W&B host does not answer a TCP connect within 3 s > "online"."""
    if requested:
        mode, reason = _normalise_mode(requested, "logger.wandb.mode"), f"logger.wandb.mode={requested}"
    elif os.environ.get("WANDB_MODE"):
        env_mode = os.environ["WANDB_MODE"]
        mode, reason = _normalise_mode(env_mode, "WANDB_MODE"), f"WANDB_MODE={env_mode}"
    else:
        base_url = _wandb_base_url()
        if not _has_credentials(base_url):
            host = _host_port(base_url)[0]
            return "offline", f"no W&B credentials: WANDB_API_KEY unset and no netrc entry for {host}"
        mode, reason = "online", "credentials found"
    if mode != "online":
        return mode, reason
    # online, whether asked for or detected: without network wandb retries for about 80 s per
    # run before it falls back by itself, so probe first (once per process)
    host, port = _probe_target(*_host_port(_wandb_base_url()))
    target = f"{host}:{port}"
    if not _reachable_once(target):
        return "offline", f"{reason}, but {target} is not reachable within {PROBE_TIMEOUT_S:g} s"
    return "online", f"{reason} and {target} reachable"


@functools.cache
def _reachable_once(target: str) -> bool:
    """The TCP probe of ``target``, once per process (the later jobs of a sweep do not wait again)."""
    host, _, port = target.rpartition(":")
    return _tcp_reachable(host, int(port), PROBE_TIMEOUT_S)


def _normalise_mode(mode: str, source: str) -> str:
    """Map a user-given mode to one of ``WANDB_MODES`` or raise ValueError."""
    canonical = _MODE_ALIASES.get(mode.strip().lower(), mode.strip().lower())
    if canonical not in WANDB_MODES:
        raise ValueError(f"{source}={mode!r}: expected one of {', '.join(WANDB_MODES)}")
    return canonical


def _wandb_base_url() -> str:
    """``WANDB_BASE_URL``, else wandb's own default (not hard-coded: it changed in 0.31)."""
    if os.environ.get("WANDB_BASE_URL"):
        return os.environ["WANDB_BASE_URL"]
    import wandb

    return wandb.Settings().base_url


def _host_port(url: str) -> tuple[str, int]:
    """Host and port a URL connects to."""
    parts = urlsplit(url)
    return parts.hostname or url, parts.port or (80 if parts.scheme == "http" else 443)


def _netrc_hosts(base_url: str) -> list[str]:
    """Netrc machine names wandb accepts for ``base_url`` (a Forge address also the W&B host behind it)."""
    hosts = [_host_port(base_url)[0]]
    try:
        from wandb.sdk.lib.urls import forge_upstream_url
    except ImportError:  # internal helper moved: the direct host is enough
        return hosts
    upstream = _host_port(forge_upstream_url(base_url))[0]
    return hosts if upstream in hosts else [*hosts, upstream]


def _has_credentials(base_url: str) -> bool:
    """An API key (or identity token) in the env or the netrc (read with the stdlib: ``wandb.login`` could prompt)."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc").expanduser()
    try:
        # An explicit path also skips netrc's permission check, which would
        # raise on a group-readable file instead of answering the question.
        entries = netrc.netrc(path)
    except (OSError, netrc.NetrcParseError):
        return False
    return any(entries.authenticators(host) is not None for host in _netrc_hosts(base_url))


def _probe_target(host: str, port: int) -> tuple[str, int]:
    """Where a connection to ``host`` really goes: the HTTPS proxy if one applies."""
    proxy = urllib.request.getproxies().get("https" if port != 80 else "http")
    if not proxy or urllib.request.proxy_bypass(host):
        return host, port
    url = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return url.hostname or host, url.port or 8080


def _tcp_reachable(host: str, port: int, timeout_s: float) -> bool:
    """A TCP connect within ``timeout_s`` *including* DNS (which ``create_connection``'s timeout does
    not cover): the attempt runs in a daemon thread abandoned at the deadline."""
    outcome: list[bool] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                outcome.append(True)
        except OSError:
            outcome.append(False)

    thread = threading.Thread(target=attempt, name="wandb-reachability", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(outcome and outcome[0])
