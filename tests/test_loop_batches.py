"""Which pipelines a cell's loop splits between the workers, and each worker's rows of a
batch (worker/corrections/loop_batches.py), in this process: TensorFlow, no engines."""

import pytest

tf = pytest.importorskip("tensorflow")

from tfmw_notebook.worker.corrections.loop_batches import batched, share_of, unseeded_shuffle  # noqa: E402


def rows(dataset):
    return [[int(v) for v in batch.numpy()] for batch in dataset]


def test_batched_pipelines_are_told_from_pipelines_of_single_examples():
    source = tf.data.Dataset.range(8)
    assert batched(source.batch(3))
    assert batched(source.shuffle(8, seed=1).batch(3).map(lambda b: b * 2).prefetch(2).take(2))
    assert batched(source.padded_batch(3).cache().repeat(2))
    assert not batched(source)
    assert not batched(source.batch(3).unbatch())
    assert not batched(tf.data.Dataset.zip((source.batch(2), source.batch(2))))


def test_each_worker_takes_its_rows_and_a_batch_smaller_than_the_workers_goes_whole():
    pipeline = tf.data.Dataset.range(9).batch(4)          # batches of 4, 4, 1
    assert rows(share_of(pipeline, 0, 2)) == [[0, 1], [4, 5], [8]]
    assert rows(share_of(pipeline, 1, 2)) == [[2, 3], [6, 7], [8]]
    uneven = tf.data.Dataset.range(5).batch(5)
    assert rows(share_of(uneven, 0, 2)) + rows(share_of(uneven, 1, 2)) == [[0, 1], [2, 3, 4]]


def test_structures_are_cut_alike():
    x = tf.reshape(tf.range(12), (6, 2))
    pipeline = tf.data.Dataset.from_tensor_slices(({"a": x}, tf.range(6))).batch(6)
    (features, labels), = list(share_of(pipeline, 1, 3))
    assert features["a"].numpy().tolist() == [[4, 5], [6, 7]]
    assert labels.numpy().tolist() == [2, 3]


def test_an_unseeded_shuffle_is_found_and_a_seeded_one_is_not():
    tf.random.set_seed(None)
    assert unseeded_shuffle(tf.data.Dataset.range(8).shuffle(8).batch(2).prefetch(1))
    assert not unseeded_shuffle(tf.data.Dataset.range(8).shuffle(8, seed=0).batch(2))
    assert not unseeded_shuffle(tf.data.Dataset.range(8).batch(2))
    tf.random.set_seed(3)
    try:
        assert not unseeded_shuffle(tf.data.Dataset.range(8).shuffle(8).batch(2))
    finally:
        tf.random.set_seed(None)
