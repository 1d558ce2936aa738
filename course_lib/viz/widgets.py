"""Interactive figures for the notebooks: move a slider, see the state change.

``FigureExplorer`` puts ipywidgets controls (sliders, dropdowns) above a matplotlib figure that is
redrawn, as a PNG, whenever a control moves. The PNG is also the widget's static view: a viewer
that cannot run widgets (a static notebook viewer, the book, a notebook opened without a kernel)
shows the figure of the controls' current values instead of an empty box.

Each chapter builds its explorer with a small function in its own ``course_lib.viz`` module (a BPE
merge stepper, a filter explorer, a roofline with a batch-size slider...) that says which controls
exist and how to draw one state. The figure of any state is also available without widgets:
``explorer.figure(step=3)``.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets
from matplotlib.figure import Figure

__all__ = ["FigureExplorer", "choice", "float_slider", "int_slider", "png"]

# Narrow enough for two controls side by side in JupyterLab's default notebook width.
_CONTROL_LAYOUT = {"width": "48%"}
_STYLE = {"description_width": "initial"}


def png(figure: Figure, dpi: int = 80) -> bytes:
    """The figure as PNG bytes (the figure is not shown anywhere)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def int_slider(description: str, minimum: int, maximum: int, value: int, step: int = 1) -> widgets.IntSlider:
    """An integer slider that redraws when released (continuous_update=False: one redraw per move)."""
    if not minimum <= value <= maximum:
        raise ValueError(f"{description}: value {value} must lie in [{minimum}, {maximum}]")
    return widgets.IntSlider(value=value, min=minimum, max=maximum, step=step, description=description,
                             continuous_update=False, style=_STYLE, layout=widgets.Layout(**_CONTROL_LAYOUT))


def float_slider(description: str, minimum: float, maximum: float, value: float, step: float) -> widgets.FloatSlider:
    """A float slider that redraws when released."""
    if not minimum <= value <= maximum:
        raise ValueError(f"{description}: value {value} must lie in [{minimum}, {maximum}]")
    return widgets.FloatSlider(value=value, min=minimum, max=maximum, step=step, description=description,
                               continuous_update=False, style=_STYLE, layout=widgets.Layout(**_CONTROL_LAYOUT))


def choice(description: str, options: Sequence[Any], value: Any) -> widgets.Dropdown:
    """A dropdown over ``options``."""
    if value not in options:
        raise ValueError(f"{description}: value {value!r} must be one of {list(options)}")
    return widgets.Dropdown(options=list(options), value=value, description=description, style=_STYLE,
                            layout=widgets.Layout(**_CONTROL_LAYOUT))


class FigureExplorer(widgets.VBox):
    """Controls above a figure; the figure is redrawn whenever a control moves.

    draw: ``draw(**values) -> Figure``, called with one keyword per control (its current value).
    controls: {keyword: ipywidgets control}, shown in this order, two per row.
    name: what the static view says this is (``"BPE merges"``).
    """

    def __init__(self, draw: Callable[..., Figure], controls: Mapping[str, widgets.ValueWidget], *,
                 name: str = "explorer") -> None:
        if not controls:
            raise ValueError("an explorer needs at least one control")
        self.draw = draw
        self.controls = dict(controls)
        self.name = name
        self.image = widgets.Image(format="png")
        rows = [widgets.HBox(list(self.controls.values())[index:index + 2]) for index in range(0, len(self.controls), 2)]
        for control in self.controls.values():
            control.observe(self._redraw, names="value")
        super().__init__([*rows, self.image])
        self._redraw()

    def values(self) -> dict[str, Any]:
        """The controls' current values, by keyword."""
        return {keyword: control.value for keyword, control in self.controls.items()}

    def figure(self, **values: Any) -> Figure:
        """The figure for the current values, with any of them overridden (no widget needed)."""
        return self.draw(**{**self.values(), **values})

    def _redraw(self, change=None) -> None:
        self.image.value = png(self.figure())

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        # Viewers that cannot run widgets fall back on the picture of the current values.
        bundle["image/png"] = base64.b64encode(self.image.value).decode("ascii")
        shown = ", ".join(f"{keyword}={value!r}" for keyword, value in self.values().items())
        bundle["text/plain"] = f"{self.name} ({shown})"
        return bundle
