"""The checkpoint picker without a kernel: a recording comm stands in for the front end."""

import ipywidgets
import pytest
from tfmw_notebook.protocol.checkpoints import CheckpointInfo
from tfmw_notebook.widgets.picker import CheckpointPicker, checkpoint_label, monitor_metric

from fake_comm import PNG_SIGNATURE, RecordingComm, recording_comms  # noqa: F401 (fixture)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def checkpoint(epoch, **metrics):
    name = f"ckpt-{epoch:06d}"
    return CheckpointInfo(path=f"/runs/a/{name}", name=name, epoch=epoch, step=70 * epoch,
                          metrics=metrics or {"loss": 1.0 / epoch, "val_loss": 1.5 / epoch},
                          saved_at=1_700_000_000.0 + 60 * epoch, run="a", model="model")


CHECKPOINTS = [checkpoint(e) for e in (1, 2, 3, 4)]


class Recorder:
    """Actions that note what they were called with."""

    def __init__(self):
        self.calls = []

    def actions(self, **overrides):
        def record(name):
            return lambda *args: self.calls.append((name, *args))
        return {name: overrides.get(name, record(name))
                for name in ("restore", "resume", "load", "delete")}


def listed_names(picker):
    return [info.name for info in picker.checkpoints]


def test_widget_tree_is_built_from_real_widgets():
    picker = CheckpointPicker(CHECKPOINTS, Recorder().actions())
    assert isinstance(picker.widget, ipywidgets.VBox)
    assert (isinstance(picker.list, ipywidgets.Select)
            and isinstance(picker.list.comm, RecordingComm))
    assert (isinstance(picker.image, ipywidgets.Image)
            and bytes(picker.image.value).startswith(PNG_SIGNATURE))
    assert isinstance(picker.model_name, ipywidgets.Text) and picker.model_name.value == "model"
    assert [b.description for b in picker.buttons.values()] == [
        "Restore on workers", "Resume training from here", "Load into notebook", "Delete"]
    assert isinstance(picker.status, ipywidgets.HTML)


def test_rows_are_labelled_newest_first_and_the_newest_is_selected():
    picker = CheckpointPicker(CHECKPOINTS, Recorder().actions())
    labels = [label for label, _ in picker.list.options]
    assert len(labels) == 4 and labels[0].startswith("ckpt-000004 · epoch 4 · ")
    assert labels[0].endswith(" · loss 0.25 · val_loss 0.375")
    assert picker.selected.name == "ckpt-000004"
    assert checkpoint_label(CheckpointInfo(path="/x/ckpt-000003", name="ckpt-000003", epoch=3,
                                           metrics={"val_loss": 0.15, "loss": 0.12})) == \
        "ckpt-000003 · epoch 3 · loss 0.12 · val_loss 0.15"


@pytest.mark.parametrize("button, expected", [
    ("restore", ("restore", CHECKPOINTS[1], "net")),
    ("resume", ("resume", CHECKPOINTS[1])),
    ("load", ("load", CHECKPOINTS[1])),
    ("delete", ("delete", CHECKPOINTS[1])),
])
def test_each_button_calls_its_action_with_the_selected_checkpoint(button, expected):
    recorder = Recorder()
    picker = CheckpointPicker(CHECKPOINTS, recorder.actions(), default_model="net")
    picker.list.value = CHECKPOINTS[1].path                  # what a click on the row does
    picker.buttons[button].click()
    if button == "delete":                                   # asks once more
        picker.buttons[button].click()
    assert recorder.calls == [expected]
    assert "ckpt-000002" in picker.status.value and "failed" not in picker.status.value


def test_restore_uses_the_model_name_typed_in():
    recorder = Recorder()
    picker = CheckpointPicker(CHECKPOINTS, recorder.actions())
    picker.select("ckpt-000003")
    picker.model_name.value = "classifier"
    picker.buttons["restore"].click()
    assert recorder.calls == [("restore", CHECKPOINTS[2], "classifier")]
    picker.model_name.value = "not a name"
    picker.buttons["restore"].click()
    assert len(recorder.calls) == 1
    assert "must be a Python identifier" in picker.status.value


def delete_selected(picker):
    """Delete asks twice: press it, then press it again to confirm."""
    picker.buttons["delete"].click()
    picker.buttons["delete"].click()


def test_delete_asks_once_more_and_a_change_of_mind_deletes_nothing():
    recorder = Recorder()
    picker = CheckpointPicker(CHECKPOINTS, recorder.actions())
    picker.select("ckpt-000003")
    picker.buttons["delete"].click()
    assert recorder.calls == [] and len(picker.checkpoints) == 4
    assert picker.buttons["delete"].description == "Confirm delete"
    assert 'press “Confirm delete” to remove ckpt-000003 from disk' in picker.status.value
    picker.select("ckpt-000002")                        # another checkpoint: asks again
    assert picker.buttons["delete"].description == "Delete"
    picker.buttons["delete"].click()
    picker.buttons["load"].click()                      # another button between: asks again
    assert picker.buttons["delete"].description == "Delete"
    picker.buttons["delete"].click()
    assert recorder.calls == [("load", CHECKPOINTS[1])] and len(picker.checkpoints) == 4
    picker.buttons["delete"].click()
    assert recorder.calls[-1] == ("delete", CHECKPOINTS[1])
    assert picker.buttons["delete"].description == "Delete"


def test_delete_removes_the_row_and_selects_a_neighbour():
    recorder = Recorder()
    picker = CheckpointPicker(CHECKPOINTS, recorder.actions())
    picker.select("ckpt-000003")
    delete_selected(picker)
    assert recorder.calls == [("delete", CHECKPOINTS[2])]
    assert listed_names(picker) == ["ckpt-000004", "ckpt-000002", "ckpt-000001"]
    assert len(picker.list.options) == 3
    assert picker.selected.name == "ckpt-000002"              # the row below moved up
    assert (list(picker.list.comm.updates("_options_labels")[-1])
            == [label for label, _ in picker.list.options])

    picker.select("ckpt-000001")                              # the last row: the one above
    delete_selected(picker)
    assert picker.selected.name == "ckpt-000002"
    for _ in range(2):
        delete_selected(picker)
    assert picker.checkpoints == [] and picker.selected is None
    assert all(button.disabled for button in picker.buttons.values())


def test_an_action_that_raises_shows_its_message_and_changes_nothing():
    def refuse(info):
        raise RuntimeError(f"cannot delete {info.name}: the workers are training\nsecond line")

    recorder = Recorder()
    picker = CheckpointPicker(CHECKPOINTS, recorder.actions(delete=refuse))
    picker.select("ckpt-000002")
    delete_selected(picker)
    sent = picker.status.comm.updates("value")[-1]
    assert "Delete failed: cannot delete ckpt-000002: the workers are training" in sent
    assert "second line" not in sent
    assert listed_names(picker) == ["ckpt-000004", "ckpt-000003", "ckpt-000002", "ckpt-000001"]

    picker.buttons["load"].click()                           # the picker still works afterwards
    assert recorder.calls == [("load", CHECKPOINTS[1])]


def test_a_string_returned_by_an_action_is_shown():
    picker = CheckpointPicker(CHECKPOINTS,
                              Recorder().actions(load=lambda info: f"model <- {info.name}"))
    picker.buttons["load"].click()
    assert picker.status.value == "model &lt;- ckpt-000004"


def test_missing_actions_disable_their_buttons_and_unknown_ones_are_refused():
    picker = CheckpointPicker(CHECKPOINTS, {"load": lambda info: None})
    assert [name for name, b in picker.buttons.items() if not b.disabled] == ["load"]
    with pytest.raises(ValueError, match=r"Invalid value for argument `actions`.*\['restart'\]"):
        CheckpointPicker(CHECKPOINTS, {"restart": lambda info: None})


def test_the_image_changes_with_the_selection():
    picker = CheckpointPicker(CHECKPOINTS, Recorder().actions())
    sent = picker.image.comm.updates("value")
    first = picker.image.value
    picker.select("ckpt-000002")
    assert picker.image.value != first
    assert len(picker.image.comm.updates("value")) == len(sent) + 1
    assert picker.image.comm.updates("value")[-1] == picker.image.value
    picker.select("ckpt-000004")
    assert picker.image.value == first                        # same selection, same drawing


def test_the_curve_comes_from_history_when_given():
    without = CheckpointPicker(CHECKPOINTS, {}).image.value
    history = {"loss": [2.0, 1.0, 0.5, 0.4, 0.3, 0.2], "val_loss": [2.5, 1.5, 0.9, 0.8, 0.7, 0.6]}
    picker = CheckpointPicker(CHECKPOINTS, {}, history=history)
    assert bytes(picker.image.value).startswith(PNG_SIGNATURE) and picker.image.value != without
    picker.refresh(CHECKPOINTS, history={"accuracy": [0.5, 0.9]})
    assert picker.image.value != without


def test_select_and_refresh():
    picker = CheckpointPicker(CHECKPOINTS[:2], Recorder().actions())
    with pytest.raises(ValueError, match=r"no checkpoint 'ckpt-000009' in this picker: pick one of "
                                         r"ckpt-000002, ckpt-000001"):
        picker.select("ckpt-000009")
    assert picker.select(CHECKPOINTS[0].path) == CHECKPOINTS[0]
    picker.refresh(CHECKPOINTS)                               # a new checkpoint arrived
    assert listed_names(picker)[0] == "ckpt-000004"
    assert picker.selected == CHECKPOINTS[0]                  # the selection stays
    picker.refresh(CHECKPOINTS[2:])                           # it went away: the newest
    assert picker.selected == CHECKPOINTS[3]


def test_an_empty_picker_draws_and_refuses_to_act():
    recorder = Recorder()
    picker = CheckpointPicker([], recorder.actions())
    assert bytes(picker.image.value).startswith(PNG_SIGNATURE) and picker.selected is None
    picker.press("load")
    assert recorder.calls == [] and "no checkpoint selected" in picker.status.value


def test_monitor_metric_preference():
    assert monitor_metric(["accuracy", "loss", "val_loss"]) == "val_loss"
    assert monitor_metric(["accuracy", "loss"]) == "loss"
    assert monitor_metric(["accuracy", "mae"]) == "accuracy"
    assert monitor_metric([]) is None
