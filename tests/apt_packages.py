"""Installing the Debian packages a test needs (sshd, Slurm, Open MPI) without starting them.

Tests that run real servers install what is missing themselves, so they also run where
`.ci/run` did not (a developer's machine). A policy-rc.d answering 101 ("action
forbidden") keeps the packages from starting system services while they install; it is
removed again unless it was there before.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

APT_TIMEOUT = 600.0
POLICY_RC_D = "/usr/sbin/policy-rc.d"


def _apt_get(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(["apt-get", *args], capture_output=True, text=True, env=env,
                          timeout=APT_TIMEOUT)


def install(packages: list[str], what: str) -> str | None:
    """apt-get install `packages` (their services not started); None, or why it failed."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"{what} is missing and cannot be installed here (needs root and apt-get)"
    own_policy = not os.path.exists(POLICY_RC_D)
    try:
        if own_policy:
            with open(POLICY_RC_D, "w") as f:
                f.write("#!/bin/sh\nexit 101\n")
            os.chmod(POLICY_RC_D, 0o755)
        done = _apt_get("install", "-y", "--no-install-recommends", *packages)
        if done.returncode != 0:   # often just stale package lists
            _apt_get("update")
            done = _apt_get("install", "-y", "--no-install-recommends", *packages)
        if done.returncode != 0:
            return f"apt-get install {' '.join(packages)} failed: {done.stderr[-2000:]}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"installing {what} failed: {e}"
    finally:
        if own_policy:
            with contextlib.suppress(OSError):
                os.remove(POLICY_RC_D)
    return None
