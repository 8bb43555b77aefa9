"""Shared fixtures; ``gpu`` tests skip with a reason when no CUDA device can be used."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_IMAGE = ROOT / "resources" / "sample" / "gsi_108.png"
SAMPLE_CASES = ROOT / "resources" / "sample" / "gsi_108_cases.json"


def load_script(name: str) -> ModuleType:
    """The module of ``scripts/<name>.py`` (scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _gpu_skip_reason() -> str | None:
    from core.errors import BackendUnavailable
    from gpu.select import gpu_backend

    try:
        gpu_backend()
    except BackendUnavailable as exc:
        return str(exc)
    return None


def pytest_collection_modifyitems(config, items):
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    reason = _gpu_skip_reason()
    if reason:
        marker = pytest.mark.skip(reason=f"no usable GPU: {reason}")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(marker)


def shown_canvas(qtbot):
    """A shown 800 × 600 :class:`app.canvas.Canvas` on a new lines model (``canvas.model``),
    with no image and no lines, closed with the test (pytest-qt)."""
    from app.canvas import Canvas
    from app.jobs import JobQueue
    from app.model import LinesModel
    from app.tracing import TracingController

    model = LinesModel()
    view = Canvas(model, TracingController(model, JobQueue()))
    qtbot.addWidget(view)
    view.resize(800, 600)
    view.show()
    return view


def close_the_window_once_loaded(opened: list, monkeypatch) -> None:
    """Once the application's main window shows, record the image it loads in ``opened`` and
    close the window, discarding any unsaved work (for tests that run the application's event
    loop; settings in Qt's test locations)."""
    from PySide6.QtCore import QStandardPaths, QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    from app.main_window import MainWindow

    def close_when_loaded():
        (window,) = [widget for widget in QApplication.topLevelWidgets()
                     if isinstance(widget, MainWindow) and widget.isVisible()]
        window.image_loaded.connect(opened.append)
        window.image_loaded.connect(window.close)

    QStandardPaths.setTestModeEnabled(True)
    monkeypatch.setattr(QMessageBox, "question",
                        lambda *args, **kwargs: QMessageBox.StandardButton.Discard)
    QTimer.singleShot(0, close_when_loaded)
