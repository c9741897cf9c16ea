"""Early stopping on held-out loss: stop after ``patience`` evaluations without improvement, or
as soon as a target loss is reached. The run keeps its best snapshot (best.json) either way."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .words import plural


@dataclass
class EarlyStopping:
    patience: int = 0  # evaluations without improvement before stopping (0: never)
    target_loss: float | None = None  # stop once held-out loss <= this (nats/token)
    min_delta: float = 0.0  # an improvement must beat the best by more than this
    best: float = math.inf
    bad: int = 0
    reason: str = ""

    def problems(self, stored: bool = False) -> list[str]:
        """Each setting out of range, named as the settings file's keys (all of them: a file
        with two was told of the first only). ``stored``: a run's own run.json, held to the
        lower ends only (a run an earlier version made with a patience or target loss above
        today's ends could not be resumed, evaluated or opened)."""
        def number(v: object) -> bool:  # (run.json is hand-editable: "3" raised TypeError)
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        from .limits import EARLY_RANGES

        pat, target, delta = (EARLY_RANGES[k] for k in ("patience", "target_loss", "min_delta"))
        if stored:
            pat, target, delta = (r._replace(hi=math.inf) for r in (pat, target, delta))

        def upto(hi: float, word: str = "to") -> str:  # (no upper end: nothing)
            if not math.isfinite(hi):
                return ""
            return f" {word} {hi:,}" if isinstance(hi, int) else f" {word} {hi:g}"

        out = []
        if not (isinstance(self.patience, int) and not isinstance(self.patience, bool)
                and pat.lo <= self.patience <= pat.hi):
            out.append(f"early_stopping.patience = {self.patience!r:.40}; expected a whole "
                       f"number from 0 (off){upto(pat.hi)}")
        if self.target_loss is not None and not (number(self.target_loss)
                                                 and math.isfinite(self.target_loss)
                                                 and target.lo < self.target_loss <= target.hi):
            out.append(f"early_stopping.target_loss = {self.target_loss!r:.40}; expected a "
                       f"number above 0 (0: off){upto(target.hi, 'up to')}")
        if not (number(self.min_delta) and math.isfinite(self.min_delta)
                and delta.lo <= self.min_delta <= delta.hi):
            out.append(f"early_stopping.min_delta = {self.min_delta!r:.40}; expected a "
                       f"number from 0{upto(delta.hi)}")
        return out

    def check(self) -> None:
        """ValueError naming every setting out of range (``problems``)."""
        from .limits import Problems

        if problems := self.problems():
            raise Problems(problems)

    def settings(self) -> dict[str, float | int | None]:
        """The settings alone (run.json's ``early_stopping``), without the tracking state."""
        return {"patience": self.patience, "target_loss": self.target_loss,
                "min_delta": self.min_delta}

    def fresh(self, best: float | None = None, bad: int = 0) -> EarlyStopping:
        """A new tracker of these settings; ``best`` (a resumed run's best held-out loss) is
        the loss an evaluation must improve on and ``bad`` the evaluations since it (saved with
        each snapshot), so patience counts across a resume as in one run."""
        return EarlyStopping(self.patience, self.target_loss, self.min_delta,
                             math.inf if best is None else best, bad)

    @property
    def enabled(self) -> bool:
        return self.patience > 0 or self.target_loss is not None

    def update(self, val_loss: float) -> bool:
        """Feed one held-out loss; True when training should stop (``reason`` says why)."""
        if not math.isfinite(val_loss):
            return False
        if val_loss < self.best - self.min_delta:
            self.best, self.bad = val_loss, 0
        else:
            self.bad += 1
        if self.target_loss is not None and val_loss <= self.target_loss:
            self.reason = f"held-out loss {val_loss:.4f} reached the target {self.target_loss:.4f}"
            return True
        if self.patience > 0 and self.bad >= self.patience:
            self.reason = (f"held-out loss has not improved on {self.best:.4f} for "
                           f"{plural(self.bad, 'evaluation')} (patience "
                           f"{self.patience})")
            return True
        return False
