"""Questions before a step that cannot be undone (deleting a run, replacing an export or the
corpus): No is the default button, so Enter pressed on reflex keeps everything (Enter deleted a
run and all its snapshots)."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget


def confirm(parent: QWidget, title: str, text: str) -> bool:
    """Ask ``text`` with Yes / No, No preselected; True only for an explicit Yes."""
    yes, no = QMessageBox.StandardButton.Yes, QMessageBox.StandardButton.No
    return QMessageBox.question(parent, title, text, yes | no, no) == yes
