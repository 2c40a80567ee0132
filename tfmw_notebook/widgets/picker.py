"""Checkpoint picker: a list of a run's checkpoints, their metric curve, and actions.

Renders the pure checkpoint catalog (`tfmw_notebook.protocol.checkpoints`). What the buttons do
is passed in as `actions`, so the widget knows nothing of clusters or TensorFlow:

    "restore"  actions["restore"](info, model_name)   load the weights into the workers' model
    "resume"   actions["resume"](info)                 continue training from this checkpoint
    "load"     actions["load"](info)                   load the model into the notebook
    "delete"   actions["delete"](info)                 remove it (on a second press); the row goes

An action that raises shows its message in the status line; a returned string is
shown there as is.
"""

from __future__ import annotations

import datetime
import html
import io
import os
from collections.abc import Callable, Mapping, Sequence

import ipywidgets as widgets

from ..protocol.checkpoints import CheckpointInfo, metric_series
from .figures import SCALE, SHOWN_DPI, sharp_image, show_figure, whole_epoch_ticks
from .metrics import VAL_PREFIX, panel_name
from .second_press import SecondPress
from .summaries import format_value

ACTIONS = ("restore", "resume", "load", "delete")
_BUTTON_LABELS = {
    "restore": "Restore on workers",
    "resume": "Resume training from here",
    "load": "Load into notebook",
    "delete": "Delete",
}
_DONE = {"restore": "restored", "resume": "resumed from", "load": "loaded", "delete": "deleted"}
_MAX_LABEL_METRICS = 4


def monitor_metric(names: Sequence[str]) -> str | None:
    """The metric to draw: val_loss, else loss, else the first one."""
    for preferred in ("val_loss", "loss"):
        if preferred in names:
            return preferred
    return names[0] if names else None


def checkpoint_label(info: CheckpointInfo) -> str:
    """'ckpt-000003 · epoch 3 · 2026-11-22 08:10 · loss 0.12 · val_loss 0.15'"""
    parts = [info.name, f"epoch {info.epoch}"]
    if info.saved_at is not None:
        parts.append(datetime.datetime.fromtimestamp(info.saved_at).strftime("%Y-%m-%d %H:%M"))
    names = sorted(info.metrics, key=lambda n: (n not in ("loss", "val_loss"), n != "loss"))
    parts += [f"{name} {format_value(info.metrics[name])}" for name in names[:_MAX_LABEL_METRICS]]
    return " · ".join(parts)


def render_checkpoint_png(checkpoints: Sequence[CheckpointInfo],
                          selected: CheckpointInfo | None = None,
                          history: Mapping[str, Sequence[float]] | None = None,
                          width: float = 5.0, height: float = 3.0,
                          dpi: int = SHOWN_DPI * SCALE) -> bytes:
    """The monitored metric by epoch, checkpoints as dots, `selected` marked; PNG bytes.

    With `history` (Keras-style, one value per epoch) the curve is drawn from it and
    epoch i's value sits at x = i + 1, where checkpoint ckpt-(i+1) was taken.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=dpi)
    figure.subplots_adjust(left=0.14, right=0.97, bottom=0.16, top=0.9)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)

    names = list(history) if history else _metric_names(checkpoints)
    monitor = monitor_metric(names)
    if monitor is None:
        text = "no checkpoints" if not checkpoints else "no metrics in these checkpoints"
        axes.text(0.5, 0.5, text, ha="center", va="center", transform=axes.transAxes, color="gray")
        axes.set_axis_off()
    else:
        _draw_curves(axes, checkpoints, monitor, history)
        _mark_selected(axes, selected, monitor, history)
        axes.set_xlabel("epoch")
        whole_epoch_ticks(axes)
        axes.grid(True, alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="small", loc="upper right")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _draw_curves(axes, checkpoints: Sequence[CheckpointInfo], monitor: str,
                 history: Mapping[str, Sequence[float]] | None) -> None:
    """The metric and its validation twin as lines, the checkpoints as dots."""
    panel = panel_name(monitor)
    for color, name in zip(("C0", "C1"), (panel, VAL_PREFIX + panel)):
        if history and name in history:
            xs, ys = list(range(1, len(history[name]) + 1)), [float(y) for y in history[name]]
        else:
            xs, ys = metric_series(checkpoints, name)
        if xs:
            axes.plot(xs, ys, color=color, linewidth=1.5, label=name,
                      linestyle="--" if name.startswith(VAL_PREFIX) else "-")
    xs, ys = metric_series(checkpoints, monitor)
    if xs:
        axes.plot(xs, ys, linestyle="none", marker="o", color="C3", markersize=4,
                  label="checkpoints")


def _mark_selected(axes, selected: CheckpointInfo | None, monitor: str,
                   history: Mapping[str, Sequence[float]] | None) -> None:
    if selected is None:
        axes.set_title(monitor, fontsize="medium")
        return
    axes.axvline(selected.epoch, color="C3", linewidth=1, alpha=0.7)
    value = _value_at(selected, monitor, history)
    if value is not None:
        axes.plot([selected.epoch], [value], marker="o", markersize=10, color="C3",
                  markerfacecolor="none", markeredgewidth=2)
    axes.set_title(f"{monitor} · {selected.name}", fontsize="medium")


class CheckpointPicker:
    """List, compare and act on checkpoints: `widget` to display."""

    def __init__(self, checkpoints: Sequence[CheckpointInfo], actions: Mapping[str, Callable],
                 *, history: Mapping[str, Sequence[float]] | None = None,
                 default_model: str = "model"):
        unknown = sorted(set(actions) - set(ACTIONS))
        if unknown:
            raise ValueError("Invalid value for argument `actions`. "
                             f"Received: unknown keys {unknown}. "
                             f"Expected keys among {list(ACTIONS)}.")
        self.actions = dict(actions)
        self.history = (None if history is None
                        else {name: list(values) for name, values in history.items()})
        self._checkpoints: list[CheckpointInfo] = []
        self._quiet = False
        self.redraws = 0

        self.list = widgets.Select(options=[], rows=8, layout=widgets.Layout(width="100%"))
        self.image = sharp_image()
        self.model_name = widgets.Text(value=default_model, description="model",
                                       placeholder="variable name on the workers")
        self.buttons = {name: widgets.Button(description=_BUTTON_LABELS[name],
                                             button_style="danger" if name == "delete" else "",
                                             layout=widgets.Layout(width="auto"))
                        for name in ACTIONS}
        for name, button in self.buttons.items():
            button.on_click(lambda _button, name=name: self.press(name))
        self._delete = SecondPress(self.buttons["delete"], "Confirm delete")
        self.status = widgets.HTML()
        self.widget = widgets.VBox([
            self.list,
            self.image,
            widgets.HBox([self.model_name, self.buttons["restore"]]),
            widgets.HBox([self.buttons["resume"], self.buttons["load"], self.buttons["delete"]]),
            self.status,
        ])
        self.widget.add_class("tfmw-picker")       # CSS classes: for styling and tests
        self.image.add_class("tfmw-curves")
        self.list.observe(self._on_select, names="value")
        self.refresh(checkpoints)

    # -- state ---------------------------------------------------------------------

    @property
    def checkpoints(self) -> list[CheckpointInfo]:
        """The listed checkpoints, newest first (the order of the rows)."""
        return list(self._checkpoints)

    @property
    def selected(self) -> CheckpointInfo | None:
        return next((info for info in self._checkpoints if info.path == self.list.value), None)

    def select(self, name: str) -> CheckpointInfo:
        """Select a row by checkpoint name ('ckpt-000003') or path."""
        for info in self._checkpoints:
            if (name in (info.name, info.path)
                    or os.path.normpath(name) == os.path.normpath(info.path)):
                self.list.value = info.path
                return info
        listed = ", ".join(info.name for info in self._checkpoints) or "none"
        raise ValueError(f"no checkpoint {name!r} in this picker: pick one of {listed}")

    def refresh(self, checkpoints: Sequence[CheckpointInfo],
                history: Mapping[str, Sequence[float]] | None = None) -> None:
        """Show a new list (keeping the selection if it is still there).

        `history` replaces the curve's."""
        previous = self.list.value
        if history is not None:
            self.history = {name: list(values) for name, values in history.items()}
        self._checkpoints = sorted(checkpoints, key=lambda info: (info.epoch, info.name),
                                   reverse=True)
        paths = [info.path for info in self._checkpoints]
        self._quiet = True
        try:
            self.list.options = [(checkpoint_label(info), info.path) for info in self._checkpoints]
            self.list.value = previous if previous in paths else (paths[0] if paths else None)
        finally:
            self._quiet = False
        for name, button in self.buttons.items():
            button.disabled = not self._checkpoints or name not in self.actions
        self._redraw()

    # -- actions -------------------------------------------------------------------

    def press(self, name: str) -> None:
        """What clicking button `name` does (also for scripts and tests)."""
        info = self.selected
        if name != "delete":
            self._delete.disarm()   # another selection disarms too (_on_select)
        if info is None:
            self._show("no checkpoint selected", error=True)
            return
        action = self.actions.get(name)
        if action is None:
            self._show(f"{_BUTTON_LABELS[name]} is not available here", error=True)
            return
        if name == "delete" and not self._delete.confirmed(info.path):
            self._show(f"press “{self._delete.armed_label}” to remove {info.name} from disk, "
                       "for good", error=True)
            return
        try:
            if name == "restore":
                model_name = self.model_name.value.strip()
                if not model_name.isidentifier():
                    raise ValueError("model variable name must be a Python identifier, "
                                     f"got {model_name!r}")
                result = action(info, model_name)
            else:
                result = action(info)
        except Exception as error:       # an action's failure is shown, never raised into the UI
            self._show(f"{_BUTTON_LABELS[name]} failed: {_one_line(error)}", error=True)
            return
        if name == "delete":
            self._remove(info)
        done = f"{_DONE[name]} {info.name}" + (f" into `{model_name}`" if name == "restore" else "")
        self._show(result if isinstance(result, str) and result else done)

    def _remove(self, info: CheckpointInfo) -> None:
        index = next(i for i, other in enumerate(self._checkpoints) if other.path == info.path)
        remaining = [other for other in self._checkpoints if other.path != info.path]
        neighbour = remaining[min(index, len(remaining) - 1)] if remaining else None
        self._quiet = True
        try:
            self.list.value = neighbour.path if neighbour else None
        finally:
            self._quiet = False
        self.refresh(remaining)

    # -- view ----------------------------------------------------------------------

    def _on_select(self, change) -> None:
        self._delete.disarm()
        if not self._quiet:
            self._redraw()

    def _redraw(self) -> None:
        show_figure(self.image,
                    render_checkpoint_png(self._checkpoints, self.selected, self.history))
        self.redraws += 1

    def _show(self, message: str, error: bool = False) -> None:
        text = html.escape(message)
        self.status.value = f'<span style="color: #b00">{text}</span>' if error else text


def _metric_names(checkpoints: Sequence[CheckpointInfo]) -> list[str]:
    names: list[str] = []
    for info in sorted(checkpoints, key=lambda info: info.epoch):
        names += [name for name in info.metrics if name not in names]
    return names


def _value_at(info: CheckpointInfo, metric: str,
              history: Mapping[str, Sequence[float]] | None) -> float | None:
    if metric in info.metrics:
        return info.metrics[metric]
    if history and metric in history and 1 <= info.epoch <= len(history[metric]):
        return float(history[metric][info.epoch - 1])
    return None


def _one_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
