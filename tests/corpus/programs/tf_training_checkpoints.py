"""Training checkpoints (TensorFlow's guide): a one-layer `tf.keras.Model` subclass saved
with `save_weights`, then trained by a single-process custom loop in EAGER mode: a
`train_step(net, example, optimizer)` with a `tf.GradientTape` and
`optimizer.apply_gradients`, called directly (no `strategy.run`, no `tf.function`) on
`next(iterator)` of a repeated, batched `tf.data` dataset of dicts, a
`tf.train.Checkpoint` of the step counter, optimizer, model and the dataset's *iterator*,
saved every 10 steps by a `tf.train.CheckpointManager(max_to_keep=3)`; then a fresh model,
optimizer and iterator restored from the manager's latest checkpoint train 50 steps more;
then the checkpoint read back by hand (`tf.train.Checkpoint` of stand-in objects, deferred
restoration, `tf.train.load_checkpoint`, list and dict tracking)."""

from corpus.offline_data import seeded

SOURCE = {
    "repository": "tensorflow/docs",
    "commit": "7c3650212740204359d4ceae481abc79345541be",
    "path": "site/en/guide/checkpoint.ipynb",
    "title": "Training checkpoints",
}
KERAS = "default"
CHANGES = [
    "dropped: the licence cell",
    "DATA seeds every generator (`corpus.offline_data.seeded(1)`): the guide's model "
    "starts from unseeded random weights; seeded, every worker starts as one process does",
]
DATA = seeded(1)
CELLS = [
    r'''import tensorflow as tf''',
    r'''class Net(tf.keras.Model):
  """A simple linear model."""

  def __init__(self):
    super(Net, self).__init__()
    self.l1 = tf.keras.layers.Dense(5)

  def call(self, x):
    return self.l1(x)''',
    r'''net = Net()''',
    r'''net.save_weights('easy_checkpoint')''',
    r'''def toy_dataset():
  inputs = tf.range(10.)[:, None]
  labels = inputs * 5. + tf.range(5.)[None, :]
  return tf.data.Dataset.from_tensor_slices(
    dict(x=inputs, y=labels)).repeat().batch(2)''',
    r'''def train_step(net, example, optimizer):
  """Trains `net` on `example` using `optimizer`."""
  with tf.GradientTape() as tape:
    output = net(example['x'])
    loss = tf.reduce_mean(tf.abs(output - example['y']))
  variables = net.trainable_variables
  gradients = tape.gradient(loss, variables)
  optimizer.apply_gradients(zip(gradients, variables))
  return loss''',
    r'''opt = tf.keras.optimizers.Adam(0.1)
dataset = toy_dataset()
iterator = iter(dataset)
ckpt = tf.train.Checkpoint(step=tf.Variable(1), optimizer=opt, net=net, iterator=iterator)
manager = tf.train.CheckpointManager(ckpt, './tf_ckpts', max_to_keep=3)''',
    r'''def train_and_checkpoint(net, manager):
  ckpt.restore(manager.latest_checkpoint)
  if manager.latest_checkpoint:
    print("Restored from {}".format(manager.latest_checkpoint))
  else:
    print("Initializing from scratch.")

  for _ in range(50):
    example = next(iterator)
    loss = train_step(net, example, opt)
    ckpt.step.assign_add(1)
    if int(ckpt.step) % 10 == 0:
      save_path = manager.save()
      print("Saved checkpoint for step {}: {}".format(int(ckpt.step), save_path))
      print("loss {:1.2f}".format(loss.numpy()))''',
    r'''train_and_checkpoint(net, manager)''',
    r'''opt = tf.keras.optimizers.Adam(0.1)
net = Net()
dataset = toy_dataset()
iterator = iter(dataset)
ckpt = tf.train.Checkpoint(step=tf.Variable(1), optimizer=opt, net=net, iterator=iterator)
manager = tf.train.CheckpointManager(ckpt, './tf_ckpts', max_to_keep=3)

train_and_checkpoint(net, manager)''',
    r'''print(manager.checkpoints)  # List the three remaining checkpoints''',
    r'''!ls ./tf_ckpts''',
    r'''to_restore = tf.Variable(tf.zeros([5]))
print(to_restore.numpy())  # All zeros
fake_layer = tf.train.Checkpoint(bias=to_restore)
fake_net = tf.train.Checkpoint(l1=fake_layer)
new_root = tf.train.Checkpoint(net=fake_net)
status = new_root.restore(tf.train.latest_checkpoint('./tf_ckpts/'))
print(to_restore.numpy())  # This gets the restored value.''',
    r'''status.assert_existing_objects_matched()''',
    r'''deferred_restore = tf.Variable(tf.zeros([1, 5]))
print(deferred_restore.numpy())  # Not restored; still zeros
fake_layer.kernel = deferred_restore
print(deferred_restore.numpy())  # Restored''',
    r'''reader = tf.train.load_checkpoint('./tf_ckpts/')
shape_from_key = reader.get_variable_to_shape_map()
dtype_from_key = reader.get_variable_to_dtype_map()

sorted(shape_from_key.keys())''',
    r'''key = 'net/l1/kernel/.ATTRIBUTES/VARIABLE_VALUE'

print("Shape:", shape_from_key[key])
print("Dtype:", dtype_from_key[key].name)''',
    r'''reader.get_tensor(key)''',
    r'''save = tf.train.Checkpoint()
save.listed = [tf.Variable(1.)]
save.listed.append(tf.Variable(2.))
save.mapped = {'one': save.listed[0]}
save.mapped['two'] = save.listed[1]
save_path = save.save('./tf_list_example')

restore = tf.train.Checkpoint()
v2 = tf.Variable(0.)
assert 0. == v2.numpy()  # Not restored yet
restore.mapped = {'two': v2}
restore.restore(save_path)
assert 2. == v2.numpy()''',
    r'''restore.listed = []
print(restore.listed)  # ListWrapper([])
v1 = tf.Variable(0.)
restore.listed.append(v1)  # Restores v1, from restore() in the previous cell
assert 1. == v1.numpy()''',
]
MODEL = "net"
# The guide prints the loss of one batch of 2 every 10 steps, each worker's of its share of
# that batch. Compared instead: the restored-and-trained `net`'s mean absolute error on the
# whole toy dataset (its 10 examples), the guide's loss over every example at once.
LOSS = ("tf.reduce_mean(tf.abs(net(tf.range(10.)[:, None]) "
        "- (tf.range(10.)[:, None] * 5. + tf.range(5.)[None, :])))")
# Seeded, nothing drawn per replica, no shuffle; each batch of 2 splits 1/1. Measured
# 2026-11-29 in one process with each batch's two halves' gradients averaged: 0.63710105,
# the same to the last digit; the loss scaled by 1 + 2**-20: 0.63710070. To be confirmed on
# 2 workers (whose `next(iterator)` each may give the whole batch instead of its half:
# then both workers average the same gradient, the same numbers).
TOLERANCE = 0.01
ONE_PROCESS = {}
EXPECT_ERROR = None
