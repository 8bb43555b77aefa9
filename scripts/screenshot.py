"""Render the main window with traced lines to docs/screenshot.png (offscreen, no display needed).

    python scripts/screenshot.py [OUTPUT.png]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from PySide6.QtCore import QEventLoop, QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.main_window import SAMPLE_IMAGE, MainWindow  # noqa: E402

ROAD = [(246, 354), (379, 284), (434, 237), (486, 172), (552, 92)]
RIVER = [(40, 494), (200, 482), (318, 452), (382, 368), (432, 282)]
PREVIEW_FROM, PREVIEW_TO = (505, 158), (560, 252)


def wait_for(signal, timeout_ms: int = 60_000) -> None:
    """Run the event loop until ``signal`` fires (or the timeout passes)."""
    loop = QEventLoop()
    signal.connect(loop.quit)
    QTimer.singleShot(timeout_ms, loop.quit)
    loop.exec()


def trace_line(window: MainWindow, kind: str, anchors) -> None:
    controller = window.controller
    window.lines_panel.new_kind.setCurrentText(kind)  # the box shows the kind drawn
    controller.press(anchors[0])
    for point in anchors[1:]:
        controller.press(point)
        wait_for(controller.traced)
    controller.finish()


def main(output: str) -> int:
    app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory() as scratch:
        settings = QSettings(os.path.join(scratch, "settings.ini"), QSettings.Format.IniFormat)
        window = MainWindow(settings, os.path.join(scratch, "autosave"))
        window.resize(1400, 860)
        window.show()
        window.open_image(str(SAMPLE_IMAGE))
        wait_for(window.image_loaded)
        trace_line(window, "road", ROAD)
        trace_line(window, "river", RIVER)
        window.model.rename(window.model.lines[0].id, "Ridge road")
        window.model.rename(window.model.lines[1].id, "Gully")
        window.controller.select(window.model.lines[1].id)  # drawn over its halo
        window.canvas.set_show_corridor(True)
        window.controller.press(PREVIEW_FROM)
        window.controller.hover(PREVIEW_TO)
        wait_for(window.controller.changed)
        while window.controller.preview is None:
            wait_for(window.controller.changed)
        window.canvas.fit()
        app.processEvents()
        window.grab().save(output)
        window.controller.cancel()
        window.model.mark_saved()
        window.close()
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", nargs="?", default=str(ROOT / "docs" / "screenshot.png"),
                        help="PNG file to write (default: docs/screenshot.png)")
    sys.exit(main(parser.parse_args().output))
