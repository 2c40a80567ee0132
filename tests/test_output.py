import io
import threading

import pytest
from tfmw_notebook.cluster.cells.output import OutputRelay, PrefixedStream

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_prefix_at_every_line_start_even_across_chunks():
    stream = PrefixedStream("[w1] ")
    assert stream.feed("a\nb") == "[w1] a\n[w1] b"
    assert stream.feed("c\n") == "c\n"
    assert stream.feed("\n") == "\n"
    assert stream.feed("d") == "[w1] d"


def test_progress_bar_redraws_keep_their_prefix():
    stream = PrefixedStream("[w0] ")
    assert stream.feed("1/3\r2/3\r3/3\n") == "[w0] 1/3\r[w0] 2/3\r[w0] 3/3\n"
    assert stream.feed("x\r\ny") == "[w0] x\r\n[w0] y"


def test_relay_forwards_only_new_text_and_chief_stdout_by_default():
    out, err = io.StringIO(), io.StringIO()
    relay = OutputRelay(2, all_output=False, stdout=out, stderr=err)
    texts = {0: ["hello\n", ""], 1: ["also\n", "warn\n"]}
    relay.poll(lambda r: tuple(texts[r]), 2)
    texts[0][0] += "again\n"
    relay.poll(lambda r: tuple(texts[r]), 2)
    relay.poll(lambda r: tuple(texts[r]), 2)
    assert out.getvalue() == "[worker 0] hello\n[worker 0] again\n"
    assert err.getvalue() == "[worker 1] warn\n"


def test_relay_all_output_shows_every_worker():
    out = io.StringIO()
    relay = OutputRelay(2, all_output=True, stdout=out, stderr=io.StringIO())
    relay.poll(lambda r: (f"r{r}\n", ""), 2)
    assert out.getvalue() == "[worker 0] r0\n[worker 1] r1\n"


class _HeldIoThread:
    """Stands in for ipykernel's I/O thread: runs what is scheduled only when told."""

    def __init__(self):
        self.thread = threading.Thread(target=threading.Event().wait, args=(5,), daemon=True)
        self.thread.start()
        self.queued = []

    def schedule(self, f):
        self.queued.append(f)


class _StreamOn(io.StringIO):
    def __init__(self, pub_thread):
        super().__init__()
        self.pub_thread = pub_thread


def test_output_sent_waits_for_the_io_thread_and_says_when_it_gave_up(monkeypatch):
    from tfmw_notebook.worker.cells.output_sent import wait_for_output_sent

    monkeypatch.setattr("sys.stdout", io.StringIO())
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert wait_for_output_sent(0.01)   # plain streams: written already
    held = _HeldIoThread()
    monkeypatch.setattr("sys.stdout", _StreamOn(held))
    monkeypatch.setattr("sys.stderr", _StreamOn(held))
    assert not wait_for_output_sent(0.1)
    assert len(held.queued) == 1   # one marker for both streams: they share the thread
    # A thread that takes in what is queued 0.1 s later: the wait ends when it does.
    monkeypatch.setattr(held, "schedule", lambda f: threading.Timer(0.1, f).start())
    assert wait_for_output_sent(5.0)


class _OutStreamOn(_StreamOn):
    """Stands in for ipykernel's OutStream: what it holds and whether a flush is pending."""

    def __init__(self, pub_thread, pending: bool):
        super().__init__(pub_thread)
        self._flush_pending = pending
        self._buffers = {"parent": io.StringIO("held")} if pending else {}

    def _flush(self):
        self._flush_pending, self._buffers = False, {}


def test_output_sent_skips_the_io_thread_when_nothing_is_left_to_send(monkeypatch):
    from tfmw_notebook.worker.cells.output_sent import wait_for_output_sent

    held = _HeldIoThread()
    monkeypatch.setattr("sys.stdout", _OutStreamOn(held, pending=False))
    monkeypatch.setattr("sys.stderr", _OutStreamOn(held, pending=False))
    assert wait_for_output_sent(0.1)
    assert held.queued == []   # a cell that printed nothing: no turn of the I/O thread


def test_output_sent_queues_both_flushes_then_one_marker_when_a_stream_holds_text(monkeypatch):
    from tfmw_notebook.worker.cells.output_sent import wait_for_output_sent

    held = _HeldIoThread()
    out, err = _OutStreamOn(held, pending=True), _OutStreamOn(held, pending=False)
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    assert not wait_for_output_sent(0.1)   # the I/O thread is held: the wait gives up
    assert held.queued[:2] == [out._flush, err._flush] and len(held.queued) == 3
    for queued in held.queued:   # the thread goes on: the flushes, then the marker
        queued()
    assert not out._flush_pending and out._buffers == {}
