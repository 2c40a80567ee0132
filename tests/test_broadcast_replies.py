"""A call sent once to every engine (ipyparallel's broadcast scheduler, how cells go
out): a reply that arrives after the client failed the call for an engine the hub gave
up on (its host cut off, then back) leaves later replies coming."""

from __future__ import annotations

import os
import time

import ipyparallel as ipp
import pytest
from tfmw_notebook.cluster.cells.worker_calls import forget_when_done

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
