"""Live plots (pyqtgraph): loss (nats per token, with a bits-per-byte axis) and gradient norm per
step and per epoch, train and held-out, non-finite (skipped) steps marked, an optional second run
overlaid for comparison. Each plot's legend is a compact box (one swatch beside each name) inside
the plot's top-right corner, on a translucent background so curves under it stay visible; drag it
with the mouse to move it. "Reset view" undoes any zoom. Redraws are debounced to 10 per second.
A run shown from its folder (``show_run``: Open, Continue) gets its whole history from metrics.csv
(step curves, epoch means, held-out points) and its own tokens per byte on the bits/byte axis."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

import engine

from .elided_label import ElidedLabel

MARGIN = 6  # pixels between a legend and its plot's top and right edges
PLACE_S = 1.0  # while steps keep coming, the legends' corners are chosen at most this often
AXIS_PX = 58  # each plot's left and right axis, values and label (7 digits fit at 8-9 pt)

def run_tokens_per_byte(folder: str | Path) -> float | None:
    """Tokens per corpus byte of a run folder (``engine.read_tokens_per_byte``); None when its
    data cannot be read."""
    return engine.read_tokens_per_byte(Path(folder))


def _dark() -> bool:
    app = QApplication.instance()
    return isinstance(app, QApplication) and app.palette().window().color().lightness() < 128


class _Legend(pg.LegendItem):
    """A legend whose box is the size of its rows (pyqtgraph's adds each row's full height and
    ignores negative spacing, leaving a blank band under the last name), and which spreads its
    entries over more columns when one column would cover most of a short plot."""

    def updateSize(self) -> None:  # noqa: N802
        if self.size is None:
            hint = self.layout.preferredSize()
            self.setGeometry(0, 0, hint.width(), hint.height())

    def fit(self, height: float, width: float = 1e9) -> None:
        """The fewest columns (each swatch kept beside its name) that keep the box within about
        half of a ``height``-pixel plot: one row of every entry when none does; hidden when even
        that does not fit, or when it is wider than the plot (it would cover the axes)."""
        n = len(self.items)
        if not n:
            return
        row = max(max(s.height(), lab.height()) for s, lab in self.items)
        _, top, _, bottom = self.layout.getContentsMargins()
        for cols in range(1, n + 1):
            rows = math.ceil(n / cols)
            box = top + bottom + rows * row + (rows - 1) * self.layout.verticalSpacing()
            if box <= 0.55 * height:
                break
        self.setColumnCount(cols)
        wide = self.layout.preferredSize().width()
        self.setVisible(box + 2 * MARGIN <= height and wide + 2 * MARGIN <= width)
        if self.on_fit is not None:
            self.on_fit()

    on_fit: Callable[[], None] | None = None  # told after each fit (a hidden legend's key shows)


# the corners a legend may sit in: (x, y) of the data area, y 0 at the top, and the offset
# from it; the first is where it starts, and where it stays when no corner covers fewer points
CORNERS = (((1, 0), (-MARGIN, MARGIN)), ((0, 0), (MARGIN, MARGIN)),
           ((1, 1), (-MARGIN, -MARGIN)), ((0, 1), (MARGIN, -MARGIN)))


def covered(legend: Any, vb: Any, corner: tuple[int, int], xs: np.ndarray, ys: np.ndarray
            ) -> int:
    """How many of the points (``xs``, ``ys``, in data units) a legend at ``corner`` of the
    view box ``vb`` covers (its box and margin, in the view's range now)."""
    (x0, x1), (y0, y1) = vb.viewRange()
    w, h = vb.width(), vb.height()
    if w <= 0 or h <= 0:
        return 0
    lw = (legend.width() + MARGIN) / w * (x1 - x0)
    lh = (legend.height() + MARGIN) / h * (y1 - y0)
    xa, xb = (x1 - lw, x1) if corner[0] else (x0, x0 + lw)
    ya, yb = (y1 - lh, y1) if corner[1] == 0 else (y0, y0 + lh)  # (the view's y grows upward)
    return int(np.count_nonzero((xs >= xa) & (xs <= xb) & (ys >= ya) & (ys <= yb)))


def place(legend: Any, vb: Any, xs: np.ndarray, ys: np.ndarray) -> None:
    """Move ``legend`` to the corner of its plot that covers the fewest of the points, when that
    is fewer than where it is (a held-out curve that stayed near the top, a fine-tune's, ran
    under the top-right legend for the last quarter of the run)."""
    if not legend.isVisible() or not len(xs):
        return
    now = getattr(legend, "corner", CORNERS[0][0])
    counts = {c: covered(legend, vb, c, xs, ys) for c, _ in CORNERS}
    best = min(counts, key=lambda c: (counts[c], c != now))
    if counts[best] < counts[now]:
        offset = dict(CORNERS)[best]
        legend.anchor(itemPos=best, parentPos=best, offset=offset)
        legend.corner = best


def _legend(plot: Any, bg: str, fg: str) -> Any:
    """A compact legend inside ``plot``'s top-right corner: one row per curve (swatch, then its
    name), tight spacing, a small font, a translucent box (the curves under it show through),
    never more than about half the plot's height (more columns when the plot is short)."""
    fill = pg.mkColor(bg)
    fill.setAlpha(170)
    edge = pg.mkColor(fg)
    edge.setAlpha(70)
    legend = _Legend(offset=(-MARGIN, MARGIN), horSpacing=4, verSpacing=-6, labelTextSize="8pt",
                     brush=pg.mkBrush(fill), pen=pg.mkPen(edge))
    legend.layout.setContentsMargins(4, 2, 6, 2)
    legend.setParentItem(plot.vb)  # inside the data area, anchored to its top-right corner
    plot.vb.sigResized.connect(lambda vb: legend.fit(vb.height(), vb.width()))
    return legend


SIDE_BY_SIDE_BELOW = 330  # canvas height (px) under which the plots go side by side
REDRAW_MS = 100  # the live curves are redrawn at most this often (ms) ...
MAX_REDRAW_MS = 3000  # ... and at least this often
DRAW_SHARE = 0.05  # ... and in between, so that drawing them takes at most this share of the time:
# a redraw on a 2-core VM under Xvfb took ~55 ms, and at 10 a second the window trained at a
# third of the command line's speed (the GUI thread held the GIL the training thread needs
# between its kernels; 277 against 85 ms a small step, measured)


class _Canvas(pg.GraphicsLayoutWidget):
    """The plots' view; ``paint_s`` is how long its paints take (seconds, a running mean)."""

    paint_s = 0.0

    def paintEvent(self, ev: Any) -> None:  # noqa: N802
        t0 = time.perf_counter()
        super().paintEvent(ev)
        self.paint_s = 0.5 * self.paint_s + 0.5 * (time.perf_counter() - t0)


def _unbroken(name: str) -> str:
    """A curve's name that a wrapped key line breaks only between names (at 800x560 it broke
    "held-out epoch" after "held-"): non-breaking spaces and hyphen (U+2011)."""
    return name.replace(" ", "&nbsp;").replace("-", "\u2011")


class PlotsPanel(QWidget):
    def __init__(self) -> None:
        super().__init__()
        dark = _dark()
        bg, fg = ("#1e1f22", "#d0d0d0") if dark else ("w", "k")
        pg.setConfigOptions(antialias=False, background=bg, foreground=fg)
        self.canvas = _Canvas()
        self.canvas.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # no keys: a Tab stop there showed
        # nothing (a keyboard user lost the focus after Reset view)
        self.loss_plot = self.canvas.addPlot(row=0, col=0)
        self.norm_plot = self.canvas.addPlot(row=1, col=0)
        for plot, title in ((self.loss_plot, "Loss"), (self.norm_plot, "Gradient norm (pre-clip)")):
            plot.setTitle(title, size="9pt")  # small titles, one "step" label (the x axes are
        # linked): at 900x600 two plots' titles and labels left each data area 20 px
        self.canvas.ci.layout.setRowStretchFactor(0, 3)  # the loss, what a user watches, gets 3/5
        self.canvas.ci.layout.setRowStretchFactor(1, 2)
        self.loss_legend = _legend(self.loss_plot, bg, fg)
        self.norm_legend = _legend(self.norm_plot, bg, fg)
        for p in (self.loss_plot, self.norm_plot):
            p.showGrid(x=True, y=True, alpha=0.3)
            for side in ("bottom", "left", "right"):  # steps and losses are plain numbers: an
                p.getAxis(side).enableAutoSIPrefix(False)  # empty plot said "step (x0.001)"
        self.norm_plot.setLabel("bottom", "step")
        self.loss_plot.setLabel("left", "loss", units="nats/token")
        self.loss_plot.showAxis("right")
        self.loss_plot.setLabel("right", "bits/byte")
        self._compare: tuple[str, list[dict[str, Any]], float | None] = ("", [], None)
        self.set_tokens_per_byte(1.0)
        self.norm_plot.setXLink(self.loss_plot)
        self.norm_plot.showAxis("right")  # without values: the two data areas as wide as each
        self.norm_plot.getAxis("right").setStyle(showValues=False)  # other (``_align``)
        self._align()
        self.reset_view()
        light = {"step": "#8fb3de", "epoch": "#1f5fa8", "val": "#d2691e", "vstep": "#f0b27a",
                 "nstep": "#e0a3a3", "nepoch": "#b22222", "cmp": "#7f7f7f"}
        darkc = {"step": "#5b7fa8", "epoch": "#7fb6ff", "val": "#ffa04d", "vstep": "#c88a50",
                 "nstep": "#a06b6b", "nepoch": "#ff7070", "cmp": "#b0b0b0"}
        c = darkc if dark else light

        def curve(plot: Any, legend: Any, name: str, **kw: Any) -> Any:
            item = plot.plot(**kw)
            legend.addItem(item, name)
            return item

        lp, ll = self.loss_plot, self.loss_legend
        self.step_loss = curve(lp, ll, "train (step)", pen=pg.mkPen(c["step"], width=1))
        self.epoch_loss = curve(lp, ll, "train (epoch)", pen=pg.mkPen(c["epoch"], width=2),
                                symbol="o", symbolSize=7, symbolBrush=c["epoch"])
        self.val_loss = curve(lp, ll, "held-out (epoch)", pen=pg.mkPen(c["val"], width=2),
                              symbol="s", symbolSize=7, symbolBrush=c["val"])
        self.val_step = curve(lp, ll, "held-out (step)",  # a marker on each: one alone shows
                              pen=pg.mkPen(c["vstep"], width=1, style=Qt.PenStyle.DashLine),
                              symbol="d", symbolSize=6, symbolBrush=c["vstep"], symbolPen=None)
        self.nan_marks = curve(lp, ll, "NaN step", pen=None, symbol="x", symbolSize=10,
                               symbolBrush="r", symbolPen="r")
        self.cmp_loss = lp.plot(pen=pg.mkPen(c["cmp"], width=1, style=Qt.PenStyle.DotLine))
        self.cmp_val = lp.plot(pen=pg.mkPen(c["cmp"], width=2, style=Qt.PenStyle.DashLine))
        np_, nl = self.norm_plot, self.norm_legend
        self.step_norm = curve(np_, nl, "step", pen=pg.mkPen(c["nstep"], width=1))
        self.epoch_norm = curve(np_, nl, "epoch mean", pen=pg.mkPen(c["nepoch"], width=2),
                                symbol="o", symbolSize=7, symbolBrush=c["nepoch"])
        self.cmp_norm = np_.plot(pen=pg.mkPen(c["cmp"], width=1, style=Qt.PenStyle.DotLine))
        self.reset_btn = QPushButton("Reset view")
        self.reset_btn.setToolTip("Undo zoom/pan and follow the data again (mouse wheel zooms)")
        self.reset_btn.clicked.connect(self.reset_view)
        keys = {  # each plot's curves as text: shown above the plots when a legend is hidden
            "loss": [(c["step"], "━", "train step"), (c["epoch"], "●", "train epoch"),
                     (c["val"], "■", "held-out epoch"), (c["vstep"], "┅", "held-out step")],
            "grad norm": [(c["nstep"], "━", "step"), (c["nepoch"], "●", "epoch mean")]}
        self.key_label = QLabel("")
        self.key_label.setTextFormat(Qt.TextFormat.RichText)
        self.key_label.setWordWrap(True)  # (one line, it made the window 1,011 px wide at its
        self.key_label.setSizePolicy(QSizePolicy.Policy.Ignored,  # smallest height, where it
                                     QSizePolicy.Policy.Preferred)  # shows: 640x480 asked)
        self._keys = {ll: ("loss", keys["loss"]), nl: ("grad norm", keys["grad norm"])}
        for legend in (ll, nl):
            legend.on_fit = self._show_keys
        self.compare_label = ElidedLabel("")  # (a 200-character run name made the window
        # 2,062 px wide, and it never shrank back; a long line was cut without a "…")
        top = QHBoxLayout()
        top.addWidget(self.key_label, 1)
        top.addWidget(self.compare_label, 1)
        top.addWidget(self.reset_btn)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addLayout(top)
        lay.addWidget(self.canvas, 1)
        self._timer = QTimer(self)
        self._timer.setInterval(REDRAW_MS)
        self._timer.timeout.connect(self._tick)
        self.redraw_wait_s = REDRAW_MS / 1000  # after a redraw, the next waits this long
        self._drawn_at = 0.0  # (time.perf_counter() of the timer's last redraw)
        self._place_due = False  # the legends' corners to be chosen at the next tick
        self._placed_at = 0.0
        self.clear()
        self._timer.start()

    def _show_keys(self) -> None:
        """The key of each plot whose legend does not fit it (in a 900x600 window the loss
        curves had no names), as one small line above the plots."""
        parts = []
        for legend, (plot, entries) in self._keys.items():
            if not legend.isVisible():
                parts.append(f"{plot}: " + " ".join(
                    f'<span style="color:{col}">{glyph}</span>&nbsp;{_unbroken(name)}'
                    for col, glyph, name in entries))
        self.key_label.setText(f"<small>{' · '.join(parts)}</small>" if parts else "")
        self.key_label.setVisible(bool(parts))

    def resizeEvent(self, event: Any) -> None:  # noqa: N802
        """Short and wide (a small window): the two plots side by side, each the full height
        (stacked, each got ~20-30 px of data area at 900x600); else stacked, the loss on top."""
        super().resizeEvent(event)
        h, w = self.canvas.height(), self.canvas.width()
        self._arrange(side=h < SIDE_BY_SIDE_BELOW and w > 1.6 * h)

    def _arrange(self, side: bool) -> None:
        if side == getattr(self, "side_by_side", False):
            return
        self.side_by_side = side
        layout = self.canvas.ci
        layout.removeItem(self.norm_plot)
        if side:
            layout.addItem(self.norm_plot, row=0, col=1)
        else:
            layout.addItem(self.norm_plot, row=1, col=0)
        grid = layout.layout
        grid.setRowStretchFactor(0, 3 if not side else 1)
        grid.setRowStretchFactor(1, 2 if not side else 0)
        grid.setColumnStretchFactor(0, 2 if side else 1)
        grid.setColumnStretchFactor(1, 1 if side else 0)
        self.loss_plot.setLabel("bottom", "step" if side else None)
        self.loss_plot.showAxis("bottom")

    def set_tokens_per_byte(self, tpb: float) -> None:
        """The bits/byte axis at ``tpb`` tokens per corpus byte (``engine.bits_per_byte``)."""
        self.tokens_per_byte = tpb
        self.loss_plot.getAxis("right").setScale(engine.bits_per_byte(1.0, tpb))
        if self._compare[0]:  # the grey run's losses are drawn on this run's scale
            self._draw_compare()

    def reset_view(self) -> None:
        """Follow the data again; the y range ignores the top 3 % of values (the first steps of
        a fresh model sit far above the rest)."""
        for p in (self.loss_plot, self.norm_plot):
            p.enableAutoRange(axis="x")
            p.enableAutoRange(axis="y", enable=0.97)

    def clear(self) -> None:
        self.steps: list[float] = []
        self.losses: list[float] = []
        self.norms: list[float] = []
        self.nan_steps: list[float] = []
        self.nan_y: list[float] = []
        self.epoch_x: list[float] = []
        self.epoch_losses: list[float] = []
        self.epoch_norms: list[float] = []
        self.val_x: list[float] = []
        self.val_losses: list[float] = []
        self.val_step_x: list[float] = []
        self.val_step_losses: list[float] = []
        self._history_step: int = 0  # the last step drawn from metrics.csv (load_history)
        self._history_epochs: set[int] = set()  # the epochs whose means came from metrics.csv
        self._dirty = True
        self._redraw()  # the curves empty now: a repaint's auto-range saw the old data
        for p in (self.loss_plot, self.norm_plot):  # no curves: no axes of the run drawn before
            p.setRange(xRange=(0, 1), yRange=(0, 1), padding=0)  # (steps 1-23, loss 9-11 stayed)
        self.reset_view()  # ... and follow the next run's data

    def show_run(self, folder: str | Path) -> None:
        """Show a run from its folder (Open, Continue): its full history and its own bits/byte
        scale (1 token per byte when its data cannot be read)."""
        folder = Path(folder)
        self.load_history(engine.read_kept_metrics(folder),
                          epochs_done=engine.read_epochs_done(folder))
        self.set_tokens_per_byte(run_tokens_per_byte(folder) or 1.0)

    def load_history(self, rows: list[dict[str, Any]], epochs_done: int = 0) -> None:
        """Replace the curves with a run's metrics.csv rows, drawn as the live run drew them
        (``engine.read_history``: step curves, one epoch-mean point per completed epoch,
        held-out points per step and per epoch). Live reports of steps and epochs already drawn
        from here are not drawn twice."""
        self.clear()
        h = engine.read_history(rows, epochs_done)
        for name in ("steps", "losses", "norms", "nan_steps", "nan_y", "val_step_x",
                     "val_step_losses", "epoch_x", "epoch_losses", "epoch_norms", "val_x",
                     "val_losses"):
            setattr(self, name, getattr(h, name))
        self._history_step = h.last_step
        self._history_epochs = h.epochs_done
        self._dirty = True

    def set_compare(self, name: str, rows: list[dict[str, Any]],
                    tokens_per_byte: float | None = None) -> None:
        """Overlay another run's train (dotted) and held-out (dashed) loss and its gradient norm
        (dotted) in grey (the gradient norm was left out). A run of another tokenizer
        (``tokens_per_byte`` more than 1 % from the shown run's) has its losses drawn at equal
        bits per byte on the shown run's scale: a byte run at 1.44 nats/token sat below a BPE
        run at 1.96 that was 4x better per byte, and the right axis read it with the wrong
        tokenizer."""
        self._compare = (name, rows, tokens_per_byte)
        self._draw_compare()

    def _draw_compare(self) -> None:
        name, rows, tpb = self._compare
        scale = tpb / self.tokens_per_byte if tpb and self.tokens_per_byte else 1.0
        rescaled = abs(scale - 1.0) > 0.01
        if not rescaled:
            scale = 1.0
        st = [(r["step"], r["loss"] * scale) for r in rows if r["kind"] == "step"
              and r.get("loss") is not None and math.isfinite(r["loss"])]
        ev = [(r["step"], r["val_loss"] * scale) for r in rows if r["kind"] == "eval"
              and r.get("val_loss") is not None]
        gn = [(r["step"], r["grad_norm"]) for r in rows if r["kind"] == "step"
              and isinstance(r.get("grad_norm"), float) and math.isfinite(r["grad_norm"])]
        self.cmp_loss.setData([s for s, _ in st], [v for _, v in st])
        self.cmp_val.setData([s for s, _ in ev], [v for _, v in ev])
        self.cmp_norm.setData([s for s, _ in gn], [v for _, v in gn])
        other = (f"; another tokenizer ({1 / tpb:.1f} bytes a token, this run's "
                 f"{1 / self.tokens_per_byte:.1f}): its loss drawn at equal bits/byte"
                 if rescaled and tpb else "")  # ("1 tokens a byte")
        self.compare_label.set_full(f"grey: {name} (dotted train, dashed held-out{other})"
                                    if name else "")

    def add_step(self, r: engine.StepReport) -> None:
        if r.step <= self._history_step:  # read from metrics.csv already (a continued run)
            return
        self._history_step = 0  # past the history: from here every report is new
        if self.steps and r.step <= self.steps[-1]:  # the guard rolled back past drawn steps:
            self._forget_from(r.step)  # they were undone (a line drawn back over them)
        if r.nonfinite or not math.isfinite(r.loss):
            self.nan_steps.append(r.step)
            self.nan_y.append(self.losses[-1] if self.losses else 0.0)
        else:
            self.steps.append(r.step)
            self.losses.append(r.loss)
            self.norms.append(r.grad_norm)
        if r.val_loss is not None and math.isfinite(r.val_loss):
            self.val_step_x.append(r.step)
            self.val_step_losses.append(r.val_loss)
        self._dirty = True

    def _forget_from(self, step: int) -> None:
        """Drop the points of ``step`` and after (steps a rollback undid)."""
        for xs, *ys in ((self.steps, self.losses, self.norms), (self.nan_steps, self.nan_y),
                        (self.val_step_x, self.val_step_losses),
                        (self.epoch_x, self.epoch_losses, self.epoch_norms),
                        (self.val_x, self.val_losses)):
            keep = sum(1 for x in xs if x < step)  # (in step order)
            for a in (xs, *ys):
                del a[keep:]

    def add_epoch(self, e: engine.EpochReport, step: int) -> None:
        if e.epoch in self._history_epochs:
            return
        self.epoch_x.append(step)
        self.epoch_losses.append(e.train_loss)
        self.epoch_norms.append(e.grad_norm)
        if e.val is not None:
            self.val_x.append(step)
            self.val_losses.append(e.val.loss)
        self._dirty = True

    def _tick(self) -> None:
        now = time.perf_counter()
        if self._place_due and (not self._dirty or now - self._placed_at >= PLACE_S):  # a
            self._place_due = False  # tick after the redraw (the views have ranged to the new
            self._placed_at = now  # data), or a second on while steps keep coming (a small
            self._place_legends()  # run's 25 a second left every tick dirty: never placed)
        if self._dirty and now - self._drawn_at >= self.redraw_wait_s:
            self._drawn_at = now  # (not by a redraw called directly: clear() draws empty curves)
            self._redraw()

    def _place_legends(self) -> None:
        """Each legend to the corner of its plot where it covers the fewest points."""
        loss_x = [*self.steps, *self.epoch_x, *self.val_x, *self.val_step_x]
        loss_y = [*self.losses, *self.epoch_losses, *self.val_losses, *self.val_step_losses]
        norm_x, norm_y = [*self.steps, *self.epoch_x], [*self.norms, *self.epoch_norms]
        for legend, plot, xs, ys in ((self.loss_legend, self.loss_plot, loss_x, loss_y),
                                     (self.norm_legend, self.norm_plot, norm_x, norm_y)):
            place(legend, plot.vb, np.asarray(xs, float), np.asarray(ys, float))

    def _redraw(self) -> None:
        if not self._dirty:
            return
        t0 = time.perf_counter()
        self._dirty = False
        self.step_loss.setData(self.steps, self.losses)
        self.step_norm.setData(self.steps, self.norms)
        self.epoch_loss.setData(self.epoch_x, self.epoch_losses)
        self.epoch_norm.setData(self.epoch_x, self.epoch_norms)
        self.val_loss.setData(self.val_x, self.val_losses)
        self.val_step.setData(self.val_step_x, self.val_step_losses)
        self.nan_marks.setData(self.nan_steps, self.nan_y)
        self._place_due = True
        self.redrawn_in(time.perf_counter() - t0 + self.canvas.paint_s)

    def _align(self) -> None:
        """Both plots' side axes as wide as each other (fixed once: ``AXIS_PX``), so their data
        areas share both edges and the linked step axes read the same: the loss plot's
        bits/byte axis made its area narrower, and a 21-step run read 1-21 there and 0-22 on
        the gradient norm. (Setting them from their text's width at each redraw crashed the
        window at exit in 7 of 36 runs under load: segfaults in Qt's teardown.)"""
        for side in ("left", "right"):
            for p in (self.loss_plot, self.norm_plot):
                p.getAxis(side).setWidth(AXIS_PX)

    def redrawn_in(self, seconds: float) -> None:
        """Drawing the live curves took ``seconds`` (their new data, and the view's last paint):
        the next redraw of new data waits that many over ``DRAW_SHARE``, from ``REDRAW_MS`` to
        ``MAX_REDRAW_MS`` (the timer keeps ticking at ``REDRAW_MS``: a new interval restarted
        it, and a run followed every 100 ms then never drew)."""
        self.redraw_wait_s = min(MAX_REDRAW_MS, max(REDRAW_MS, seconds * 1000 / DRAW_SHARE)) / 1000
