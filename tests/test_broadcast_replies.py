"""A call sent once to every engine (ipyparallel's broadcast scheduler, how cells go
out): a reply that arrives after the client failed the call for an engine the hub gave
up on (its host cut off, then back) leaves later replies coming; what each engine
printed is kept however soon the call ended."""

from __future__ import annotations

import os
import time

import ipyparallel as ipp
import pytest
from tfmw_notebook.cluster.cells.worker_calls import forget_when_done, per_engine

pytestmark = pytest.mark.timeout(120)


def test_a_late_reply_for_an_engine_given_up_on_keeps_later_replies_coming():
    with ipp.Cluster(n=2, log_level=40) as client:
        ids = client.ids
        view = client.broadcast_view(ids)
        sent = view.apply_async(time.sleep, 2)
        for msg_id in sent.msg_ids:
            forget_when_done(client, msg_id)
        # What the client does when the hub says an engine left: its call fails at once.
        for engine_id in ids:
            client._io_loop.add_callback(client._handle_stranded_msgs, engine_id,
                                         client._engines[engine_id])
        with pytest.raises(ipp.error.RemoteError, match="EngineError"):
            sent.get(timeout=10)
        time.sleep(3)   # ...and then the engines' own replies arrive
        assert len(view.apply_async(os.getpid).get(timeout=20)) == 2


def test_each_engines_output_is_kept_when_the_call_ended_before_it_was_looked_at():
    # The notebook held (a busy machine) while the call's replies and output all came in.
    with ipp.Cluster(n=2, log_level=40) as client:
        sent = client.broadcast_view(client.ids).apply_async(eval, "print('hello') or 7")
        assert sent.wait_for_output(20)
        results = per_engine(sent)
        assert [result.get(timeout=5) for result in results] == [7, 7]
        assert [result.metadata["stdout"] for result in results] == ["hello\n", "hello\n"]
        assert [result.metadata["engine_id"] for result in results] == client.ids
