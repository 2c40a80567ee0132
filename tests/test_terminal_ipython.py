"""Terminal IPython (no widgets): the dashboard falls back to one text line per epoch."""

import re

import pytest

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def shell(terminal_shell, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # fit() saves checkpoints under the working directory
    ip = terminal_shell
    ip.run_line_magic("tfdist", "start -n 2")
    try:
        yield ip
    finally:
        ip.run_line_magic("tfdist", "stop")


def test_fit_in_a_terminal_prints_one_line_per_epoch_per_worker(shell, capsys):
    shell.run_cell_magic("tfdist", "", (
        "import numpy as np\n"
        "x = np.linspace(0, 1, 256, dtype='float32')[:, None]\n"
        "train = tf.data.Dataset.from_tensor_slices((x, 2 * x)).batch(32).repeat()\n"
        "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(1,))])\n"
        "model.compile(optimizer='sgd', loss='mse')\n"
        "model.fit(train, epochs=3, steps_per_epoch=8)\n"))
    lines = capsys.readouterr().out.strip().splitlines()
    epoch_lines = [line for line in lines if re.match(r"worker \d · epoch \d/3 · loss ", line)]
    assert sorted(line[:18] for line in epoch_lines) == sorted(
        f"worker {rank} · epoch {epoch}" for rank in (0, 1) for epoch in (1, 2, 3))
    assert lines[-1].startswith("3 epochs · ")
    assert len(lines) == 7  # no progress bars: six epoch lines and the summary
