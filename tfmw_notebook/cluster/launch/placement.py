"""Where a launcher puts the engines of a restart on chosen hosts (a shrink: shrink.py).

`place` is {host: engines}: the hosts left after one was lost, as many engines on each as it
held. Each of ipyparallel's launchers that spans hosts is told so in its own terms, added to
what the cluster's profile configured for it: the SSH launcher's `engines` map; sbatch's
`--nodelist` and `--nodes` (on the submit command: ipyparallel does not put
`SlurmLauncher.options` in the job script, and a command-line option wins over the
script's `#SBATCH` lines); mpiexec's `--host host:slots,...` (with the profile's
`--hostfile`, Open MPI keeps to the hosts named). Other launchers place engines themselves.
Host names are the engines' own (`socket.gethostname()`), which Slurm and Open MPI take as
node and host names on the clusters they run.
"""

from __future__ import annotations

from typing import Any

import ipyparallel as ipp


def placed(cluster: ipp.Cluster, place: dict[str, int] | None) -> dict[str, Any]:
    """Keyword arguments for `cluster.start_engines` that put its engines on `place`."""
    if not place:
        return {}
    kind = launcher_name(cluster).lower()
    if "ssh" in kind:
        return {"engines": dict(place)}
    if "slurm" in kind:
        submit = list(configured(cluster, "submit_command") or ["sbatch"])
        return {"submit_command": submit + [f"--nodelist={','.join(place)}",
                                            f"--nodes={len(place)}"]}
    if "mpi" in kind:
        hosts = ",".join(f"{host}:{count}" for host, count in place.items())
        return {"mpi_args": list(configured(cluster, "mpi_args") or []) + ["--host", hosts]}
    return {}


def launcher_name(cluster: ipp.Cluster) -> str:
    launcher = cluster.engine_launcher_class
    return getattr(launcher, "__name__", str(launcher))


def configured(cluster: ipp.Cluster, trait: str) -> Any:
    """The value the cluster's launchers get for `trait` (its profile's config, else the
    launcher's default): read from a launcher made as the cluster makes them, not started."""
    launcher = cluster.engine_launcher_class(parent=cluster, log=cluster.log,
                                             profile_dir=cluster.profile_dir,
                                             cluster_id=cluster.cluster_id)
    return getattr(launcher, trait, None)
