"""Live plots (pyqtgraph): loss and gradient norm per step and per epoch, train and held-out,
with non-finite (skipped) steps marked. Redraws are debounced to 10 per second."""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QVBoxLayout, QWidget

import engine


class PlotsPanel(QWidget):
    def __init__(self) -> None:
        super().__init__()
        pg.setConfigOptions(antialias=False, background="w", foreground="k")
        self.loss_plot = pg.PlotWidget(title="Loss")
        self.norm_plot = pg.PlotWidget(title="Gradient norm (pre-clip)")
        for p in (self.loss_plot, self.norm_plot):
            p.showGrid(x=True, y=True, alpha=0.3)
            p.addLegend(offset=(-10, 10))
            p.setLabel("bottom", "step")
        self.norm_plot.setXLink(self.loss_plot)
        self.step_loss = self.loss_plot.plot(pen=pg.mkPen("#8fb3de", width=1), name="train (step)")
        self.epoch_loss = self.loss_plot.plot(pen=pg.mkPen("#1f5fa8", width=2), symbol="o",
                                              symbolSize=7, symbolBrush="#1f5fa8", name="train (epoch)")
        self.val_loss = self.loss_plot.plot(pen=pg.mkPen("#d2691e", width=2), symbol="s",
                                            symbolSize=7, symbolBrush="#d2691e", name="held-out (epoch)")
        dashed = pg.mkPen("#f0b27a", width=1, style=Qt.PenStyle.DashLine)
        self.val_step = self.loss_plot.plot(pen=dashed, name="held-out (step)")
        self.nan_marks = self.loss_plot.plot(pen=None, symbol="x", symbolSize=10,
                                             symbolBrush="r", symbolPen="r", name="NaN step")
        self.step_norm = self.norm_plot.plot(pen=pg.mkPen("#e0a3a3", width=1), name="step")
        self.epoch_norm = self.norm_plot.plot(pen=pg.mkPen("#b22222", width=2), symbol="o",
                                              symbolSize=7, symbolBrush="#b22222", name="epoch mean")
        lay = QVBoxLayout(self)
        lay.addWidget(self.loss_plot)
        lay.addWidget(self.norm_plot)
        self.clear()
        self._timer = QTimer(self)
        self._timer.setInterval(100)
        self._timer.timeout.connect(self._redraw)
        self._timer.start()

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
        self._dirty = True

    def add_step(self, r: engine.StepReport) -> None:
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

    def add_epoch(self, e: engine.EpochReport, step: int) -> None:
        self.epoch_x.append(step)
        self.epoch_losses.append(e.train_loss)
        self.epoch_norms.append(e.grad_norm)
        if e.val is not None:
            self.val_x.append(step)
            self.val_losses.append(e.val.loss)
        self._dirty = True

    def _redraw(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        self.step_loss.setData(self.steps, self.losses)
        self.step_norm.setData(self.steps, self.norms)
        self.epoch_loss.setData(self.epoch_x, self.epoch_losses)
        self.epoch_norm.setData(self.epoch_x, self.epoch_norms)
        self.val_loss.setData(self.val_x, self.val_losses)
        self.val_step.setData(self.val_step_x, self.val_step_losses)
        self.nan_marks.setData(self.nan_steps, self.nan_y)
