"""The pure part of the liveness watch: which running ranks went silent."""

import pytest
from tfmw_notebook.cluster.cells.beat_jitter import MIN_GAPS, ON_TIME, BeatJitter
from tfmw_notebook.cluster.cells.liveness import SilenceWatch
from tfmw_notebook.protocol.events import ALIVE_KEY

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_rank_whose_count_stops_moving_is_silent_after_the_limit():
    clock = Clock()
    watch = SilenceWatch(2, silence=6.0, clock=clock)
    for beat in range(1, 6):
        clock.now += 1.0
        watch.see(0, {ALIVE_KEY: beat})
        watch.see(1, {ALIVE_KEY: 1})          # rank 1 beat once, then nothing
    assert watch.silent([0, 1]) == []         # 4 s since rank 1's beat
    clock.now += 2.0
    watch.see(0, {ALIVE_KEY: 6})
    assert watch.silent([0, 1]) == [1]
    assert watch.quiet_for(1) == pytest.approx(6.0)


def test_finished_ranks_are_not_watched_and_other_keys_are_not_beats():
    clock = Clock()
    watch = SilenceWatch(2, silence=2.0, clock=clock)
    clock.now += 3.0
    watch.see(0, {"tfmw-events-1": [], "user-key": 1})
    assert watch.silent([0]) == [0]           # data that is not a beat does not count
    assert watch.silent([]) == []
    watch.see(0, {ALIVE_KEY: 1})
    assert watch.silent([0, 1]) == [1]


def test_the_cells_start_counts_as_a_sign_of_life():
    clock = Clock()
    watch = SilenceWatch(1, silence=2.0, clock=clock)
    watch.see(0, None)
    clock.now += 1.9
    assert watch.silent([0]) == []


def test_silence_must_be_positive():
    with pytest.raises(ValueError, match="silence must be > 0"):
        SilenceWatch(1, silence=0)


def _beat_every(watch, clock, gap, beats, ranks=(0, 1), start=1):
    for beat in range(start, start + beats):
        clock.now += gap
        for rank in ranks:
            watch.see(rank, {ALIVE_KEY: beat})


def test_the_limit_follows_the_gaps_between_beats_measured_on_these_workers():
    clock = Clock()
    jitter = BeatJitter()
    watch = SilenceWatch(2, silence=6.0, clock=clock, jitter=jitter)
    _beat_every(watch, clock, gap=1.4, beats=MIN_GAPS)
    assert watch.limit() == 6.0               # beats about on time: the floor
    _beat_every(watch, clock, gap=3.0, beats=60, start=MIN_GAPS + 1)
    assert ON_TIME == 1.5 and watch.limit() == pytest.approx(12.0)   # twice as late: twice
    clock.now += 10.0                         # 10 s without a beat: within the measured limit
    assert watch.silent([0, 1]) == []
    clock.now += 2.0
    assert watch.silent([0, 1]) == [0, 1]
    # The next cell's watch starts from what this one measured: the cluster keeps it.
    assert SilenceWatch(2, silence=6.0, clock=clock, jitter=jitter).limit() == watch.limit()


def test_one_long_gap_does_not_raise_the_limit_and_a_few_gaps_leave_the_floor():
    jitter = BeatJitter()
    for _ in range(MIN_GAPS - 1):
        jitter.add(3.0, 1)
    assert jitter.gap() is None and jitter.threshold(6.0) == 6.0   # too few to judge by
    jitter = BeatJitter()
    for _ in range(100):
        jitter.add(1.0, 1)
    jitter.add(12.0, 1)                       # a worker held its GIL for 12 s once
    assert jitter.threshold(6.0) == 6.0


def test_beats_that_arrive_together_share_the_wait_and_old_gaps_are_forgotten():
    jitter = BeatJitter(kept=32)
    for _ in range(32):
        jitter.add(8.0, 8)                    # the notebook looked every 8 s: 1 s apart
    assert jitter.gap() == 1.0
    for _ in range(32):
        jitter.add(3.0, 1)
    assert jitter.gap() == 3.0 and jitter.threshold(6.0) == pytest.approx(12.0)
    assert jitter.threshold(2.0) == pytest.approx(4.0)   # the floor a test sets, stretched
    jitter.add(1.0, 0)                        # no new beat, nothing measured
    jitter.add(-1.0, 1)
    assert len(jitter) == 32


def test_the_first_beat_of_a_cell_is_not_a_gap():
    clock = Clock()
    watch = SilenceWatch(1, silence=6.0, clock=clock)
    clock.now += 30.0                         # the cell's first line ran 30 s before beating
    watch.see(0, {ALIVE_KEY: 1})
    assert len(watch.jitter) == 0


def test_a_worker_ends_itself_once_its_controller_stays_unreachable(monkeypatch):
    import socket

    from tfmw_notebook.worker.liveness import controller_watch

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert controller_watch.install("127.0.0.1", port)
    clock, ended = Clock(), []
    controller_watch.check(now=clock, end=ended.append)     # first miss: the clock starts
    clock.now += controller_watch.LIMIT_SECONDS - 1
    controller_watch.check(now=clock, end=ended.append)
    assert ended == []
    clock.now += 1
    controller_watch.check(now=clock, end=ended.append)
    assert ended == [3]


def test_a_cell_that_ends_while_the_controller_is_gone_leaves_the_watch_on():
    """The fit ended before the limit: the engine is still ended once the controller has
    not answered for LIMIT_SECONDS, not left idle."""
    import socket

    from tfmw_notebook.worker.liveness import controller_watch

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert controller_watch.install("127.0.0.1", port)
        assert controller_watch.watch_on_after_cell() is None    # it answers: no watch
    clock, ended = Clock(), []
    controller_watch.check(now=clock, end=ended.append)   # the cell's last beat: a miss

    def tick():
        clock.now += 1.0
        return clock.now

    def end(code):   # what os._exit would do: nothing runs on, the watch included
        ended.append(code)
        controller_watch.install(None, None)

    watching = controller_watch.watch_on_after_cell(period=0.01, now=tick, end=end)
    assert watching is not None
    watching.join(timeout=10)
    assert not watching.is_alive()
    assert ended == [3]


def test_a_worker_in_a_private_network_watches_the_controller_s_unix_socket(tmp_path, capsys):
    import socket

    from tfmw_notebook.worker.liveness import controller_watch

    path = str(tmp_path / "engine-4242")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen()
        assert controller_watch.install(path, None)
        ended = []
        controller_watch.check(end=ended.append)     # answers: nothing happens
        assert ended == []
    clock, ended = Clock(), []
    controller_watch.check(now=clock, end=ended.append)
    clock.now += controller_watch.LIMIT_SECONDS
    controller_watch.check(now=clock, end=ended.append)
    assert ended == [3]
    assert f"the controller at {path} has not answered" in capsys.readouterr().err


def test_no_watch_when_the_controller_was_never_reachable_from_the_worker():
    from tfmw_notebook.worker.liveness import controller_watch

    assert not controller_watch.install("127.0.0.1", 9)   # nothing listens on port 9
    ended = []
    controller_watch.check(end=ended.append)
    assert ended == []


def test_a_rank_in_its_own_code_without_progress_is_stalled_while_another_waits():
    from tfmw_notebook.cluster.cells.liveness import StallWatch
    from tfmw_notebook.protocol.events import FRAMEWORK, WHERE_KEY

    clock = Clock()
    watch = StallWatch(2, clock=clock)
    stuck = {ALIVE_KEY: 1, WHERE_KEY: "<tfdist-cell-3>:5 in on_train_batch_end"}
    waiting = {ALIVE_KEY: 1, WHERE_KEY: FRAMEWORK}
    for second in range(10):
        clock.now += 1
        watch.see(0, dict(waiting, **{ALIVE_KEY: second}), output_size=10)
        watch.see(1, dict(stuck, **{ALIVE_KEY: second}), output_size=5)
    # The first sight of rank 1 counts as progress; 9 s in its own code since.
    assert watch.stalled([0, 1], after=8.0) == [(1, 9.0, stuck[WHERE_KEY])]
    assert watch.stalled([0, 1], after=10.0) == []
    # Output from rank 1 is progress: the clock starts again.
    watch.see(1, stuck, output_size=6)
    assert watch.stalled([0, 1], after=1.0) == []


def test_nobody_is_stalled_when_no_rank_waits_in_the_framework():
    from tfmw_notebook.cluster.cells.liveness import StallWatch
    from tfmw_notebook.protocol.events import WHERE_KEY

    clock = Clock()
    watch = StallWatch(2, clock=clock)
    for rank in (0, 1):   # every rank in its own code (say, preparing data): no one waits
        watch.see(rank, {WHERE_KEY: "<tfdist-cell-1>:2 in <module>"}, output_size=0)
    clock.now += 100
    assert watch.stalled([0, 1], after=1.0) == []


def test_stall_limits_are_checked_where_made():
    from tfmw_notebook.protocol.run_options import StallLimits

    assert StallLimits().warning == 60.0 and StallLimits().timeout is None
    with pytest.raises(ValueError, match="Invalid value for argument `timeout`"):
        StallLimits(timeout=0)


def test_a_silent_rank_seen_running_is_busy_and_asked_again_a_second_later():
    clock = Clock()
    watch = SilenceWatch(2, silence=6.0, clock=clock, recheck=1.0)
    clock.now += 6.0
    assert watch.silent([0, 1]) == [0, 1]
    watch.vouch(1)                            # its process runs: busy
    assert watch.busy(1) and not watch.busy(0)
    assert watch.silent([0, 1]) == [0]
    clock.now += 1.0
    assert watch.silent([0, 1]) == [0, 1]     # the probe's word holds one recheck period
    assert watch.quiet_for(1) == pytest.approx(7.0)
    watch.see(1, {ALIVE_KEY: 1})              # it beats again: no longer busy
    assert not watch.busy(1) and watch.silent([1]) == []


def test_a_busy_rank_is_stalled_since_its_last_beat_while_another_waits():
    from tfmw_notebook.cluster.cells.liveness import SILENT, StallWatch
    from tfmw_notebook.protocol.events import FRAMEWORK, WHERE_KEY

    clock = Clock()
    watch = StallWatch(2, clock=clock)
    tracing = {ALIVE_KEY: 3, WHERE_KEY: FRAMEWORK}     # its last beat: inside TensorFlow
    watch.see(0, tracing, output_size=0)
    watch.see(1, tracing, output_size=0)
    clock.now += 20
    watch.see(0, tracing, output_size=0)
    watch.see(1, tracing, output_size=0, silent_for=20.0)
    assert watch.stalled([0, 1], after=15.0) == [(1, 20.0, SILENT)]
    watch.see(1, tracing, output_size=1)               # it printed: progress
    assert watch.stalled([0, 1], after=1.0) == []


def test_a_tensorflow_port_is_judged_by_its_http2_greeting():
    import socket
    import threading

    from tfmw_notebook.cluster.cells.worker_probe import grpc_verdict

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refused_port = closed.getsockname()[1]      # nothing listens once it is closed
    assert grpc_verdict("127.0.0.1", refused_port) == "gone"

    with socket.socket() as mute:                   # accepted by the kernel, never answered
        mute.bind(("127.0.0.1", 0))
        mute.listen()
        assert grpc_verdict("127.0.0.1", mute.getsockname()[1], greeting=0.3) == "stopped"

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def greet():
            connection, _ = server.accept()
            with connection:
                connection.recv(64)
                connection.sendall(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))   # SETTINGS, empty

        thread = threading.Thread(target=greet, daemon=True)
        thread.start()
        assert grpc_verdict("127.0.0.1", server.getsockname()[1]) == "busy"
        thread.join(timeout=5)


def test_beats_that_arrived_while_the_notebook_was_held_up_count_before_judging():
    """The watch loop looked at rank 0, then drew the dashboard for 9 s (its first drawing
    imports matplotlib): rank 0 beat all along, and its latest data says so."""
    clock = Clock()
    watch = SilenceWatch(2, silence=6.0, clock=clock)
    watch.see(0, {ALIVE_KEY: 1})
    clock.now += 9.0                          # held up in rank 0's dashboard update
    watch.see(1, {ALIVE_KEY: 10})
    latest = {0: {ALIVE_KEY: 10}, 1: {ALIVE_KEY: 10}}
    assert watch.silent([0, 1], latest) == []
    clock.now += 6.0
    assert watch.silent([0, 1], latest) == [0, 1]   # and now neither has beaten for 6 s
