"""A local start that cannot fit this host (more workers than 8 a core, or more memory
than it has) is refused in one line before anything starts, naming the estimate; the
notebook keeps what it had."""

from __future__ import annotations

import psutil
import pytest
from IPython.core.error import UsageError
from tfmw_notebook.cluster.launch import host_capacity
from tfmw_notebook.cluster.launch.host_capacity import HostCapacity

from kernel_session import kernel_with_extension
from memory_cgroup import memory_limited_or_skip

pytestmark = pytest.mark.timeout(120)

GIB = 1 << 30


@pytest.mark.unit
def test_more_than_eight_workers_a_core_is_refused_naming_the_most_that_fit():
    two_cores = HostCapacity(available_bytes=64 * GIB, cores=2)
    assert host_capacity.problem(16, two_cores) is None
    said = host_capacity.problem(17, two_cores)
    assert said.startswith("17 workers would share this host's 2 cores: more than 8 a core")
    assert "Start at most 16 here" in said and "\n" not in said
    assert said.endswith("(`TFCluster.attach()`)")       # the API's words; magics translate


@pytest.mark.unit
def test_more_memory_than_the_host_has_is_refused_naming_the_estimate():
    small = HostCapacity(available_bytes=2 * GIB, cores=64)
    said = host_capacity.problem(8, small)
    assert said.startswith("8 workers need at least 3.1 GiB of memory (an idle worker holds "
                           "350 MiB of its own, plus 420 MiB they share), but this host has "
                           "2.0 GiB available. Start at most 4 here"), said
    assert host_capacity.problem(4, small) is None      # 420 + 4 x 350 MiB = 1.8 GiB
    assert host_capacity.problem(8, HostCapacity(available_bytes=None, cores=64)) is None


@pytest.mark.unit
def test_spare_engines_count_as_workers_and_the_line_names_both():
    two_cores = HostCapacity(available_bytes=64 * GIB, cores=2)
    assert host_capacity.problem(14, two_cores, spares=2) is None
    said = host_capacity.problem(14, two_cores, spares=3)
    assert said.startswith("14 workers and 3 spare engines would share this host's 2 cores")
    assert "Start at most 13 here" in said
    small = HostCapacity(available_bytes=2 * GIB, cores=64)
    assert host_capacity.problem(4, small) is None
    said = host_capacity.problem(4, small, spares=2)
    assert said.startswith("4 workers and 2 spare engines need at least 2.5 GiB"), said
    assert "Start at most 2 here" in said                 # 4 fit, 2 of them spares


@pytest.mark.unit
def test_the_cgroups_room_is_its_limit_less_its_usage(tmp_path):
    limit, usage = tmp_path / "limit", tmp_path / "usage"
    files = (str(limit), str(usage))
    limit.write_text("1073741824\n")
    usage.write_text("268435456\n")
    assert host_capacity._cgroup_room(files) == 768 << 20
    limit.write_text("max\n")                      # cgroup v2: no limit
    assert host_capacity._cgroup_room(files) is None
    limit.write_text("9223372036854771712\n")      # cgroup v1: no limit
    assert host_capacity._cgroup_room(files) is None
    assert host_capacity._cgroup_room((str(tmp_path / "none"), str(usage))) is None


@pytest.mark.unit
def test_this_process_cgroup_files_are_found_for_v1_and_v2():
    files = host_capacity._cgroup_files("4:memory:/job/7\n1:cpu:/\n0::/user.slice/a\n")
    assert files == [
        ("/sys/fs/cgroup/memory/job/7/memory.limit_in_bytes",
         "/sys/fs/cgroup/memory/job/7/memory.usage_in_bytes"),
        ("/sys/fs/cgroup/user.slice/a/memory.max", "/sys/fs/cgroup/user.slice/a/memory.current")]


@pytest.mark.unit
def test_a_start_past_this_hosts_cores_is_refused_and_starts_nothing(ip):
    cores = host_capacity.read_capacity().cores
    ip.user_ns["precious"] = 42
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    with pytest.raises(UsageError) as error:
        ip.run_line_magic("tfdist", f"start -n {cores * 8 + 1}")
    said = str(error.value)
    assert f"workers would share this host's {cores} cores" in said and "\n" not in said
    assert said.endswith("(`%tfdist attach`)"), said
    after = {child.pid for child in psutil.Process().children(recursive=True)}
    assert after <= before                        # no engine, no controller
    assert ip.user_ns["precious"] == 42
    with pytest.raises(UsageError, match="no cluster is running"):
        ip.run_line_magic("tfdist", "status")


def test_a_start_past_the_memory_a_cgroup_allows_is_refused(tmp_path):
    """A real limit: the notebook's kernel moved into a memory cgroup with 1.5 GiB of
    room, where 4 idle workers need 1.8 GiB."""
    with kernel_with_extension(str(tmp_path)) as kernel:
        pid = int(kernel.ok("import os\nprint(os.getpid())").stdout.split()[-1])
        with memory_limited_or_skip(pid, 3 * GIB // 2):
            out = kernel.execute("%tfdist start -n 4", timeout=60)
            assert out.status == "error", out.stdout
            said = out.error_text + out.stderr
            assert "4 workers need at least 1.8 GiB of memory" in said, said
            assert "but this host has 1.5 GiB available. Start at most 3 here" in said, said
            status = kernel.execute("%tfdist status", timeout=60)
            assert "no cluster is running" in status.error_text + status.stderr
