"""The test kernel driver pairs every cell with its own reply."""

from kernel_session import KernelSession


def test_a_stray_reply_does_not_shift_the_status_of_later_cells():
    session = KernelSession()
    try:
        # What `wait_for_ready` leaves behind when the kernel starts slowly:
        # a reply nobody read, ahead of the next cell's.
        session.client.kernel_info()
        failed = session.execute("raise ValueError('this cell fails')", timeout=60)
        assert failed.status == "error" and failed.error["ename"] == "ValueError"
        assert session.execute("1 + 1", timeout=60).status == "ok"
    finally:
        session.shutdown()
