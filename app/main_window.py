"""The main window: menus, canvas, parameter and line panels, status bar; :func:`run_app`."""

from __future__ import annotations

import html
import math
import os
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from PySide6.QtCore import (
    QCoreApplication,
    QEvent,
    QLockFile,
    QRect,
    QSettings,
    QStandardPaths,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QAction, QKeySequence, QPainter
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QApplication,
    QDialog,
    QDialogButtonBox,
    QDockWidget,
    QFileDialog,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QScrollArea,
    QStatusBar,
    QStyle,
    QStyleOption,
    QTextEdit,
    QVBoxLayout,
)

from app.canvas import Canvas
from app.display import display_levels, load_for_display
from app.files import (
    AutosaveWriter,
    autosave_path,
    export_lines,
    file_stamp,
    load_autosave,
    set_aside_bad_autosave,
)
from app.imports import (
    PROGRESS_PREFIX,
    edited_note,
    plural,
    skipped_feature,
    unknown_kind_note,
    unknown_kinds,
)
from app.jobs import Job, JobQueue
from app.model import LinesModel, ModelChange, same_lines
from app.panels import EVIDENCE_ON_IMAGE, LinesPanel, ParamsPanel
from app.params import image_ground_resolution, reads_image_as_evidence
from app.session import (
    Session,
    SessionReadError,
    is_session_file,
    load_session,
    write_session,
)
from app.traces import TraceOutcome, error_text
from app.tracing import TracingController
from core import surface, version
from core.errors import BadParameter, ImageReadError, TraceError
from core.geojson import coordinate_space
from core.georef import sidecar_files
from core.output import refuse_overwriting_input
from core.raster import Raster, ReadCancelled, list_images
from core.surface import UNKNOWN_GROUND_NOTE
from core.teaching import check_new_folder, training_set, write_training_set
from core.tracer import TraceParams, evidence_source, ground_resolution_unknown
from core.vectors import read_lines

SAMPLE_IMAGE = Path(__file__).resolve().parent.parent / "resources" / "sample" / "gsi_108.png"
IMAGE_FILTER = "Images (*.png *.jpg *.jpeg *.tif *.tiff *.jp2 *.j2k *.img);;All files (*)"
SESSION_FILTER = "roadtracer sessions (*.roadtracer.json *.json)"
EXPORT_LONLAT = "GeoJSON, WGS84 longitude/latitude (*.geojson *.json)"
EXPORT_SOURCE = "GeoJSON, the image's own CRS (*.geojson *.json)"
EXPORT_PIXELS = "GeoJSON, pixel coordinates (*.geojson *.json)"
MAX_RECENT = 8
#: Most features skipped by an import that the messages log lists.
MAX_SKIPPED_LISTED = 50
#: The trace field's tooltip in the status bar (after a failed trace: why it failed).
TRACE_TIP = "The last trace: its time, score and click-to-line time"
#: Messages kept for View ▸ Messages….
MAX_MESSAGES = 200
#: Command-line wording in the engine's messages, and the application's for it.
APP_TERMS = (
    (re.compile(r"endpoints a=\((.*?)\) and b=\((.*?)\)"), r"the points (\1) and (\2)"),
    (re.compile(r"\bbetween a and b\b"), "between these two points"),
    (re.compile(r"give --points or a halfwidth"), "set Points per guide or a Half-width"),
    (re.compile(r" or give its CRS with --image-crs EPSG:…"), ""),
    (re.compile(r"--ground-resolution, or the app's ground resolution parameter"),
     "Parameters ▸ Ground resolution"),
)
#: Help ▸ Keys and mouse, section by section: (input, what it does). docs/APP.md's tables of
#: the sections of these names hold the same rows.
KEYS = {
    "Tracing": (
        ("Click", "start a line; every further click traces the optimal path from the last "
                  "anchor to here"),
        ("Shift + click, Ctrl + click", "straight segment (manual override); the preview is "
                                        "straight too"),
        ("Moving the mouse", "live preview of the trace from the last anchor to the cursor "
                             "(dashed)"),
        ("Double-click, Enter", "finish the line (the double-clicked point is its last anchor); "
                                "it is left unselected"),
        ("Esc", "cancel an import in progress, else the segment in progress and stop drawing "
                "(with nothing drawn: deselect)"),
        ("Backspace", "remove the last segment of the line being drawn, else of the selected "
                      "line"),
        ("Ctrl+Z; Ctrl+Shift+Z or Ctrl+Y", "undo; redo: every edit (segments, moves, "
                                           "re-traces, renames, hide, delete); the Edit menu "
                                           "names the step"),
        ("Drag a vertex (square; not drawing)", "move it; the one or two segments beside it "
                                                "are traced again"),
        ("Drag any other point of a line (not drawing)", "add a vertex there: the segment is "
                                                         "traced again as two, through it"),
        ("Click a vertex (not drawing)", "start a new line exactly there (junctions)"),
        ("Click on or near a line (within 7 screen px)", "the point lands exactly on the line "
                                                         "(T-junctions without gaps); so does "
                                                         "a vertex dropped there"),
        ("Alt + click on a line", "select that segment: parameter changes re-trace it, G shows "
                                  "its corridor"),
        ("Del, Ctrl+Backspace", "delete the selected line (on a Mac keyboard ⌘⌫, or fn+⌫: its "
                                "⌫ key is Backspace)"),
    ),
    "Viewing": (
        ("Wheel", "zoom around the cursor"),
        ("Ctrl++ or Ctrl+=, Ctrl+−", "zoom in, out around the middle of the window"),
        ("Middle drag, Space + drag", "pan"),
        ("Arrow keys", "pan (the canvas has the keys once the mouse enters it)"),
        ("F, Ctrl+0", "fit the image to the window"),
        ("G", "show the search corridor (its cross lines are where the line's points may lie) "
              "for the preview or the selected segment"),
        ("S", "colour links by score (on at start): each line on its own scale, red at its "
              "weakest links → pale yellow → blue at its strongest; straight segments are dashed"),
        ("E", "show the evidence raster being traced instead of the image (Parameters ▸ "
              "Evidence)"),
        ("F1", "the keys and mouse actions (Help ▸ Keys and mouse)"),
    ),
    "Files": (
        ("Ctrl+O", "open an image (or drop one on the window; a dropped GeoJSON file is "
                   "imported on the open image)"),
        ("PgDown, PgUp", "next, previous image in the open image's folder"),
        ("Ctrl+Shift+O", "open a session (or drop its .json file on the window)"),
        ("Ctrl+S, Ctrl+Shift+S", "save the session; save it as a new file"),
        ("Ctrl+I", "import lines from a GeoJSON file"),
        ("Ctrl+E", "export the lines as GeoJSON"),
        ("Ctrl+Q", "quit (on Linux and macOS)"),
    ),
}
#: The canvas's accessible description.
CANVAS_DESCRIPTION = ("The image and its traced lines. Click on a road, then further along it, "
                      "to trace it; Enter finishes the line, Esc cancels the segment. Arrow "
                      "keys pan, Ctrl++ and Ctrl+− zoom, F fits the image; F1 lists every key.")
#: Fields whose typing the canvas does not interrupt by taking the focus.
TEXT_FIELDS = (QLineEdit, QAbstractSpinBox, QTextEdit, QPlainTextEdit)
AUTOSAVE_DELAY_MS = 1000
#: Said on opening a file shown from an overview that has none of its own.
NO_OVERVIEWS_NOTE = ("the file has no overviews: it is read whole to show it; `gdaladdo FILE` "
                     "builds them, for faster opening")
#: :meth:`MainWindow.confirm_discard`'s answer where the user discards lines it left in place.
DISCARD = "discard"
#: How long (s) the process waits at exit for a trace still running in the background (the
#: engine cannot stop midway; a trace takes well under a second): ending the interpreter
#: under it aborts the process.
EXIT_TRACE_WAIT_S = 5.0


def in_app_terms(text: str) -> str:
    """An engine message with its command-line wording put as the application says it
    (:data:`APP_TERMS`): "between a and b" → "between these two points"."""
    for pattern, replacement in APP_TERMS:
        text = pattern.sub(replacement, text)
    return text


def backend_name(note: str) -> str:
    """The backend alone from its chooser's note: "CPU (numba, 2 threads)" from "CPU (numba,
    2 threads): GPU unavailable: …", "GPU: NAME" from "GPU: NAME, float32 link scores …"."""
    if note.startswith("GPU: "):
        return "GPU: " + re.split(r", | \(|: ", note.removeprefix("GPU: "), maxsplit=1)[0]
    return note.split(": ", 1)[0]


def unusable_evidence(raster: Raster, params: TraceParams) -> str | None:
    """Why the evidence raster of ``params`` cannot serve ``raster``; None if it can (or there
    is none). One of the image's size, a PNG, JPEG, … decoded whole, is read: in the worker
    when a session names it."""
    try:
        evidence_source(raster, params)
    except TraceError as exc:
        return error_text(exc)
    return None


def keys_html() -> str:
    """:data:`KEYS` as rich text: a two-column table (input, what it does) per section."""
    sections = []
    for section, rows in KEYS.items():
        cells = "".join(f"<tr><td style='padding-right:16px'><b>{html.escape(keys)}</b></td>"
                        f"<td>{html.escape(what)}</td></tr>" for keys, what in rows)
        sections.append(f"<h3>{section}</h3><table cellspacing='2'>{cells}</table>")
    return "".join(sections)


class StatusBar(QStatusBar):
    """The status bar: a message too long for the room left of the permanent fields ends in
    "…" instead of being cut mid-word (the window makes the whole message its tooltip)."""

    #: Room (px) between the message and the bar's edge or the first permanent field.
    MARGIN = 6

    def message_area(self) -> QRect:
        """Where the message is drawn: left of the visible permanent fields."""
        fields = [child.x() for child in self.findChildren(
            QLabel, options=Qt.FindChildOption.FindDirectChildrenOnly) if child.isVisible()]
        right = min(fields, default=self.width()) - self.MARGIN
        return QRect(self.MARGIN, 0, max(right - self.MARGIN, 0), self.height())

    def shown_message(self) -> str:
        """The current message as drawn: elided at the end to fit :meth:`message_area`."""
        return self.fontMetrics().elidedText(self.currentMessage(), Qt.TextElideMode.ElideRight,
                                             self.message_area().width())

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if not self.currentMessage():
            super().paintEvent(event)
            return
        painter = QPainter(self)
        option = QStyleOption()
        option.initFrom(self)
        self.style().drawPrimitive(QStyle.PrimitiveElement.PE_PanelStatusBar, option, painter,
                                   self)
        painter.setPen(self.palette().windowText().color())
        painter.drawText(self.message_area(), Qt.AlignmentFlag.AlignLeading
                         | Qt.AlignmentFlag.AlignVCenter | Qt.TextFlag.TextSingleLine,
                         self.shown_message())
        painter.end()


@dataclass(eq=False)
class _Opening:
    """An image being opened: its path (None while the session that names it is read), and the
    answer to "Save them first?" about the lines of ``asked_about`` (the image open when it was
    asked) that the open goes on with (True, or :data:`DISCARD`: drop them once the new image
    is here). ``dropped`` is set where a later open supersedes it: its load is skipped, or its
    result thrown away."""

    path: str | None
    answer: bool | str
    asked_about: str | None
    dropped: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class _SessionFile:
    """A session file read: its path, what it holds, and its :func:`app.files.file_stamp`
    before it was read."""

    path: str
    session: Session
    stamp: tuple[int, int] | None


@dataclass(frozen=True)
class _Loaded:
    """What the worker read for an open: the image (``raster`` None where it is a session's
    image that is not found: ``missing`` says so), the session (``lost_evidence``: why its
    evidence raster cannot serve the image, if it cannot), and the image's autosave
    (``autosave_error`` where it cannot be read; neither where the image is the one open)."""

    image: str
    raster: Raster | None
    levels: list | None
    session: _SessionFile | None
    autosave: Session | None = None
    autosave_error: SessionReadError | None = None
    missing: ImageReadError | None = None
    lost_evidence: str | None = None


class MainWindow(QMainWindow):
    """The application window.

    Signals
    -------
    image_loaded(str) : an image finished opening (its path).
    error_shown(str) : an error was reported to the user.
    """

    image_loaded = Signal(str)
    #: An open's progress from the worker: (its ``_Opening``, the image's path, fraction read).
    open_progress = Signal(object, str, float)
    error_shown = Signal(str)

    def __init__(self, settings: QSettings | None = None, autosave_dir: str | None = None) -> None:
        super().__init__()
        self.settings = settings or QSettings()
        self.autosave_dir = autosave_dir or os.path.join(
            QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation),
            "autosave")
        self.raster: Raster | None = None
        self._image_levels: list | None = None  # display pyramids: the image's, the evidence's
        self._evidence_levels: list | None = None
        self._import_folder: str | None = None  # where the last imported lines came from
        self.image_path: str | None = None
        self._opening: _Opening | None = None  # the image being loaded, if any
        self.session_path: str | None = None
        self._session_stamp: tuple[int, int] | None = None  # file_stamp when read or saved
        # The open image's autosave, locked for this window; None where another window holds
        # it (this one then does not autosave), or no image is open.
        self._autosave_lock: QLockFile | None = None
        self._close_once_traced = False  # closing waits for a trace or an export in flight
        # The open (of an image or a session) asked for while a trace was in flight: made once
        # it lands, so that "Save them first?" is asked about the lines with it.
        self._open_once_traced: Callable[[], object] | None = None
        self.last_error: str | None = None
        self.last_notice: str | None = None  # the last message box shown (errors too)
        self.status_text = ""  # the status bar's message, as shown
        self.status_message = ""  # the same in full, with its details
        self.messages: deque[tuple[str, str]] = deque(maxlen=MAX_MESSAGES)  # (time, message)
        self._messages_dialog: QDialog | None = None
        self._keys_dialog: QDialog | None = None
        self.model = LinesModel()
        self.jobs = JobQueue(self)
        self.autosaver = AutosaveWriter(self.autosave_dir)
        self.writes = JobQueue(self)  # autosaves, off the window's thread
        self.controller = TracingController(self.model, self.jobs, self)
        self.canvas = Canvas(self.model, self.controller, self)
        self.canvas.setAccessibleName("Image")
        self.canvas.setAccessibleDescription(CANVAS_DESCRIPTION)
        self.canvas.installEventFilter(self)  # it takes the focus as the mouse enters it
        self.setCentralWidget(self.canvas)
        self.params_panel = ParamsPanel()
        self.lines_panel = LinesPanel(self.model, self.controller)
        right = Qt.DockWidgetArea.RightDockWidgetArea
        self._docks = [self._dock("Parameters", self.params_panel, right),
                       self._dock("Lines", self.lines_panel, right)]
        self._build_status_bar()
        self._build_menus()
        self._autosave_timer = QTimer(self, singleShot=True, interval=AUTOSAVE_DELAY_MS)
        self._autosave_timer.timeout.connect(self._autosave_in_background)
        self.model.subscribe(self._model_changed)
        self.controller.message.connect(self.show_status)
        self.controller.traced.connect(self._show_trace)
        self.controller.trace_failed.connect(self._show_trace_failed)
        self.controller.backend_changed.connect(self._show_backend)
        for signal in (self.controller.changed, self.controller.selection_changed,
                       self.controller.edits_changed):
            signal.connect(self._update_actions)
        self.open_progress.connect(self._show_open_progress)
        for signal in (self.controller.changed, self.controller.edits_changed):
            signal.connect(self._go_on_once_traced)
        self.jobs.finished.connect(lambda _job: self._go_on_once_traced())
        self.canvas.cursor_moved.connect(self._show_cursor)
        self.params_panel.params_changed.connect(self._params_changed)
        self.params_panel.backend_changed.connect(self.controller.set_backend)
        self.params_panel.evidence_requested.connect(self.choose_evidence)
        self.params_panel.evidence_changed.connect(self._evidence_changed)
        self.setAcceptDrops(True)
        self.resize(1280, 860)
        self.restoreGeometry(self.settings.value("window/geometry", b""))
        self.restoreState(self.settings.value("window/state", b""))
        self._update_title()
        self._update_actions()
        self.controller.set_backend(self.params_panel.backend.currentText())

    # -- construction --------------------------------------------------------------------------
    def _dock(self, title: str, widget, area) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(title)
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _build_status_bar(self) -> None:
        self.setStatusBar(StatusBar())
        self.cursor_label = QLabel()
        self.cursor_label.setToolTip("The pixel under the cursor (x = column, y = row)")
        self.trace_label = QLabel()
        self.trace_label.setToolTip(TRACE_TIP)
        self.backend_label = QLabel("choosing backend…")
        for label in (self.cursor_label, self.trace_label, self.backend_label):
            self.statusBar().addPermanentWidget(label)
        # A menu item's tip replaces the message while the mouse is on it: then it comes back.
        self.statusBar().messageChanged.connect(
            lambda shown: None if shown else self.statusBar().showMessage(self.status_text))

    def _action(self, menu, text: str, slot, shortcuts=(), checkable=False, checked=False,
                tip: str | None = None) -> QAction:
        action = QAction(text, self)
        action.setShortcuts([QKeySequence(s) for s in shortcuts])
        action.setCheckable(checkable)
        action.setChecked(checked)
        if tip:
            action.setStatusTip(tip)
        (action.toggled if checkable else action.triggered).connect(slot)
        menu.addAction(action)
        return action

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file = bar.addMenu("&File")
        self._action(file, "&Open image…", self.choose_image, [QKeySequence.StandardKey.Open])
        self.recent_menu = file.addMenu("Open &recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        # What acts on the open image (or, walking the folder, the one being opened).
        self.step_actions = (
            self._action(file, "&Next image in folder", lambda: self.step_image(1), ["PgDown"],
                         tip="Open the next image of this image's folder (by name), e.g. to "
                             "review a batch"),
            self._action(file, "Pre&vious image in folder", lambda: self.step_image(-1),
                         ["PgUp"]))
        file.addSeparator()
        self._action(file, "O&pen session…", self.choose_session, ["Ctrl+Shift+O"])
        self.save_actions = (
            self._action(file, "&Save session", self.save_session,
                         [QKeySequence.StandardKey.Save]),
            self._action(file, "Save session &as…", lambda: self.save_session(ask=True),
                         ["Ctrl+Shift+S"]))
        self.image_actions = (
            self._action(file, "&Import lines (GeoJSON)…", self.choose_import, ["Ctrl+I"],
                         tip="Trace the lines of a GeoJSON file on this image: roadtracer's "
                             "own exports come back as drawn, other lines (OSM, old surveys) "
                             "snap to the imagery between their vertices"),
            self._action(file, "&Export GeoJSON…", self.choose_export, ["Ctrl+E"]),
            self._action(file, "Export &training cases…", self.choose_training_export,
                         tip="Write the road lines as click cases on this image, to teach the "
                             "surface model imagery like it (scripts/train_surface_model.py; "
                             "fix the lines that miss first)"))
        file.addSeparator()
        self._action(file, "Surface &model…", self.choose_surface_model,
                     tip="Trace with another surface model than the bundled one, e.g. one "
                         "trained on imagery like yours (an ONNX file)")
        file.addSeparator()
        self._action(file, "&Quit", self.close, [QKeySequence.StandardKey.Quit])
        edit = bar.addMenu("&Edit")
        c = self.controller
        self.undo_action = self._action(edit, "&Undo", c.undo, ["Ctrl+Z"])
        self.redo_action = self._action(edit, "&Redo", c.redo, ["Ctrl+Shift+Z", "Ctrl+Y"])
        edit.addSeparator()
        # Editing keys act on the canvas and the lines list, never inside a text field (the
        # list's name editor keeps its keys: app.panels.LinesTable).
        editing = []
        for text, slot, keys in (
                ("&Finish line", c.finish, ["Return", "Enter"]),
                ("&Cancel segment", c.cancel, ["Esc"]),
                ("Remove &last segment", c.backspace, ["Backspace"]),
                ("&Delete line", self.lines_panel.delete_selected, ["Del", "Ctrl+Backspace"])):
            action = self._action(edit, text, slot, keys)
            action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            for widget in (self.canvas, self.lines_panel.table):
                widget.addAction(action)
            editing.append(action)
        self.finish_action, self.cancel_action, self.backspace_action, self.delete_action = \
            editing
        view = bar.addMenu("&View")
        self._action(view, "&Fit to window", self.canvas.fit, ["F", "Ctrl+0"])
        self._action(view, "Zoom &in", lambda: self.canvas.zoom(1.25),
                     [QKeySequence.StandardKey.ZoomIn, "Ctrl+="])
        self._action(view, "Zoom &out", lambda: self.canvas.zoom(0.8),
                     [QKeySequence.StandardKey.ZoomOut])
        view.addSeparator()
        self._action(view, "Show &corridor and guides", self.canvas.set_show_corridor, ["G"],
                     checkable=True, checked=self.canvas.show_corridor,
                     tip="Draw the guides the tracer chose from (preview or selected segment)")
        self._action(view, "Colour by link &score", self.canvas.set_colour_by_score, ["S"],
                     checkable=True, checked=self.canvas.colour_by_score,
                     tip="Colour each line's links from red (its weakest) through pale "
                         "yellow to blue (its strongest)")
        self.show_evidence_action = self._action(
            view, "Show &evidence raster", self._show_evidence_raster, ["E"], checkable=True,
            tip="Show the evidence raster being traced instead of the image (Parameters ▸ "
                "Evidence)")
        self.show_evidence_action.setEnabled(False)
        view.addSeparator()
        for dock in self._docks:
            view.addAction(dock.toggleViewAction())
        view.addSeparator()
        self._action(view, "&Messages…", self.show_messages,
                     tip="The last messages of the status bar, with their times")
        help_menu = bar.addMenu("&Help")
        self._action(help_menu, "&Keys and mouse", self.show_keys, ["F1"])
        self._action(help_menu, "&About roadtracer", self.show_about)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt override)
        """The mouse entering the canvas gives it the keys (Space to pan, Enter, Esc,
        Backspace), unless a text or number field of this window is being typed in."""
        if watched is self.canvas and event.type() == QEvent.Type.Enter \
                and self.isActiveWindow() \
                and not isinstance(QApplication.focusWidget(), TEXT_FIELDS):
            self.canvas.setFocus(Qt.FocusReason.MouseFocusReason)
        return super().eventFilter(watched, event)

    # -- messages ------------------------------------------------------------------------------
    def show_status(self, text: str, details: str = "") -> None:
        """Show ``text`` in the status bar until the next message; in full, with ``details``
        after it, it is the bar's tooltip and joins View ▸ Messages…."""
        self.status_text = text = in_app_terms(text)
        self.status_message = f"{text} ({details})" if details else text
        # An import's progress replaces the one before it in the log.
        if self.messages and text.startswith(PROGRESS_PREFIX) and \
                self.messages[-1][1].startswith(PROGRESS_PREFIX):
            self.messages.pop()
        self.messages.append((time.strftime("%H:%M:%S"), self.status_message))
        self.statusBar().showMessage(text)
        self.statusBar().setToolTip(self.status_message)
        if self._messages_dialog is not None and self._messages_dialog.isVisible():
            self._fill_messages()

    def _show_open_progress(self, opening: _Opening, path: str, fraction: float) -> None:
        """How much of the image the open in progress has read, in the status bar (not in
        View ▸ Messages…: one message a band of rows)."""
        if opening is self._opening and not opening.dropped.is_set():
            self.status_text = f"opening {os.path.basename(path)}… {fraction:.0%}"
            self.statusBar().showMessage(self.status_text)

    def show_messages(self) -> None:
        """View ▸ Messages…: the last :data:`MAX_MESSAGES` messages with their times."""
        if self._messages_dialog is None:
            self.messages_text = QPlainTextEdit(readOnly=True)
            self._messages_dialog = self._dialog("Messages", self.messages_text, 760, 380)
        self._fill_messages()
        self._messages_dialog.show()
        self._messages_dialog.raise_()

    def _dialog(self, title: str, content, width: int, height: int) -> QDialog:
        """A modeless dialog showing ``content`` above a Close button."""
        dialog = QDialog(self)
        dialog.setWindowTitle(title)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(dialog.close)
        layout = QVBoxLayout(dialog)
        layout.addWidget(content)
        layout.addWidget(buttons)
        dialog.resize(width, height)
        return dialog

    def _fill_messages(self) -> None:
        self.messages_text.setPlainText("\n".join(f"{at}  {text}" for at, text in self.messages))
        bar = self.messages_text.verticalScrollBar()
        bar.setValue(bar.maximum())

    def show_error(self, text: str, title: str = "roadtracer") -> None:
        """Report an error in the status bar and a (non-blocking) message box."""
        text = in_app_terms(text)
        self.last_error = text
        self._show_box(text, title, QMessageBox.Icon.Warning)
        self.error_shown.emit(text)

    def _show_box(self, text: str, title: str, icon: QMessageBox.Icon) -> None:
        """``text`` in the status bar and a (non-blocking) message box."""
        self.last_notice = text
        self.show_status(text)
        box = QMessageBox(icon, title, text, QMessageBox.StandardButton.Ok, self)
        box.setTextFormat(Qt.TextFormat.PlainText)  # file names are shown as written
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()

    def _show_trace(self, outcome: TraceOutcome) -> None:
        score = sum(s.score for s in outcome.segments)
        latency = self.controller.last_latency_ms
        text = f"trace {outcome.elapsed_ms:.0f} ms"
        if not math.isnan(score):
            text += f" · score {score:.2f}"
        if latency is not None:
            text += f" · click→line {latency:.0f} ms"
        if any(segment.corridor_widened for segment in outcome.segments):
            text += " · corridor widened"
        self.trace_label.setText(text)
        self.trace_label.setToolTip(TRACE_TIP)

    def _show_trace_failed(self, reason: str) -> None:
        self.trace_label.setText("trace failed")
        self.trace_label.setToolTip(in_app_terms(reason))

    def _show_backend(self, note: str) -> None:
        """The backend's name in the status bar; the chooser's ``note`` (why) its tooltip."""
        self.backend_label.setText(backend_name(note))
        self.backend_label.setToolTip(note)

    def _show_cursor(self, x: float, y: float) -> None:
        text = f"x {round(x)}  y {round(y)}"
        to_map = getattr(getattr(self.raster, "georef", None), "pixel_to_map", None)
        if callable(to_map):
            map_x, map_y = to_map((x, y))[0]
            text += f"  ·  map {map_x:.3f}, {map_y:.3f}"
        self.cursor_label.setText(text)

    def show_keys(self) -> None:
        """Help ▸ Keys and mouse: :data:`KEYS`, a table per section."""
        if self._keys_dialog is None:
            self.keys_label = QLabel(keys_html())
            self.keys_label.setTextFormat(Qt.TextFormat.RichText)
            self.keys_label.setWordWrap(True)
            self.keys_label.setContentsMargins(8, 8, 8, 8)
            scroll = QScrollArea()
            scroll.setWidget(self.keys_label)
            scroll.setWidgetResizable(True)
            self._keys_dialog = self._dialog("Keys and mouse", scroll, 720, 640)
        self._keys_dialog.show()
        self._keys_dialog.raise_()

    def about_text(self) -> str:
        """Help ▸ About: the version, the backend and surface model in use, where the guide and
        the licences are (in a checkout, or in an installed copy's metadata)."""
        project = Path(__file__).resolve().parent.parent
        backend = self.controller.backend_note or "being chosen"
        guide = project / "docs" / "APP.md"
        licences = [project / "LICENSE"] if (project / "LICENSE").is_file() else \
            installed_licences()
        return (f"roadtracer {version()}: click-to-trace roads and rivers on aerial and "
                f"satellite imagery.\n\nBackend: {backend}\nSurface model: "
                f"{os.fspath(surface.MODEL_PATH)}\n\nUser guide: "
                f"{guide if guide.is_file() else 'docs/APP.md of the source distribution'}\n"
                f"Licences: {', '.join(map(str, licences)) or 'MIT'} (the program), "
                "LICENSE.md beside the bundled model and sample image in "
                f"{project / 'resources'}")

    def show_about(self) -> None:
        QMessageBox.about(self, "About roadtracer", self.about_text())

    def _update_title(self) -> None:
        name = os.path.basename(self.image_path) if self.image_path else "no image"
        self.setWindowTitle(f"{name}{' *' if self.model.dirty else ''} — roadtracer")

    def _model_changed(self, _change: ModelChange) -> None:
        self._update_title()
        self._update_actions()
        if self.image_path is not None:
            self._autosave_timer.start()

    def _update_actions(self) -> None:
        """Enable the actions that can act now; Undo and Redo name their step."""
        model, controller = self.model, self.controller
        self.undo_action.setText(f"&Undo {model.undo_label or ''}".strip())
        self.redo_action.setText(f"&Redo {model.redo_label or ''}".strip())
        # An undo asked for while an edit is re-traced waits for it: it can act then, and so
        # can a redo of such an undo.
        self.undo_action.setEnabled(model.undo_label is not None or controller.edits_pending)
        self.redo_action.setEnabled(model.redo_label is not None or controller.undo_waiting)
        selected = model.line(controller.selection[0]) is not None
        self.finish_action.setEnabled(controller.drawing)
        self.cancel_action.setEnabled(controller.drawing or controller.imports.running
                                      or controller.selection != (None, None))
        self.backspace_action.setEnabled(controller.drawing or selected)
        self.delete_action.setEnabled(selected)
        for action in (*self.save_actions, *self.image_actions):
            action.setEnabled(self.image_path is not None)
        walking = self.image_path is not None or (self._opening is not None
                                                  and self._opening.path is not None)
        for action in self.step_actions:
            action.setEnabled(walking)

    # -- images --------------------------------------------------------------------------------
    def open_initial(self, path: str | None) -> None:
        """Start-up: the given image (a folder: its first image, PgDown for the next), else
        the most recent one, else the bundled sample."""
        if path and os.path.isdir(path):
            try:
                images = list_images(Path(path))
            except TraceError as exc:
                self.show_error(str(exc), "Cannot open image")
                return
            if not images:
                self.show_error(f"no image (PNG, JPEG, TIFF) in the folder {path}",
                                "Cannot open image")
                return
            path = str(images[0])
        recent = [p for p in self.recent_files() if os.path.exists(p)]
        self.open_image(path or (recent[0] if recent else str(SAMPLE_IMAGE)))

    def choose_image(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open image", self._last_folder(),
                                              IMAGE_FILTER)
        if path:
            self.open_image(path)

    def step_image(self, offset: int) -> bool:
        """Open the image ``offset`` places after (or before) this one in its folder; while an
        image is being opened, after (or before) that one (PgDown twice: two images on)."""
        current = self._opening.path if self._opening is not None and self._opening.path \
            else self.image_path
        if current is None:
            self.show_status("open an image first")
            return False
        try:
            images = [str(path) for path in list_images(Path(current).parent)]
        except TraceError as exc:
            self.show_status(str(exc))
            return False
        index = images.index(current) + offset if current in images else -1
        if not 0 <= index < len(images):
            self.show_status(f"no {'next' if offset > 0 else 'previous'} image in "
                             f"{os.path.dirname(current)}")
            return False
        return self.open_image(images[index])

    def open_image(self, path: str) -> bool:
        """Open an image in the worker (nothing changes if it cannot be); while a trace is in
        flight, once it lands (:meth:`_wait_for_traces`).

        Returns False if the user kept the current lines instead.
        """
        if self._wait_for_traces(lambda: self.open_image(path), path):
            return True
        answer = self._confirm_replacing()
        if not answer:
            return False
        self._load(answer, image=path)
        return True

    def _wait_for_traces(self, open_it: Callable[[], object], path: str) -> bool:
        """Where a segment or an edit is being traced (not in the lines yet, so neither in what
        "Save them first?" asks about nor in a session saved then), leave ``open_it``, the open
        of ``path``, to be made once it lands (a later open replaces it) and say so; True if
        so."""
        if not self.controller.work_in_flight:
            return False
        self._open_once_traced = open_it
        self.show_status(f"opening {os.path.basename(path)} once the trace in progress lands "
                         "(Esc cancels the segment being drawn)")
        return True

    def _confirm_replacing(self) -> bool | str:
        """:meth:`confirm_discard` (``discard_now`` False) before an open, asked once: while an
        image is being opened after a Discard, a further open goes on with that answer (the
        lines it is about are still the open image's, dropped once an image is loaded)."""
        if self._opening is not None and self._opening.answer == DISCARD and \
                self._opening.asked_about == self.image_path:
            return DISCARD
        return self.confirm_discard(discard_now=False)

    def _load(self, answer: bool | str, image: str | None = None,
              session_file: str | None = None, session: _SessionFile | None = None) -> None:
        """Read, in the worker, the session ``session_file`` (unless ``session`` is the one
        read) and load ``image`` (else the session's) with its autosave, then install them; the
        user having answered ``answer`` (:meth:`_confirm_replacing`) about the open image's
        lines. An open still loading is superseded: its result is dropped (nothing of it
        installed, nothing discarded), its load skipped if not begun."""
        image = os.path.abspath(image) if image else None
        if self._opening is not None:
            self._opening.dropped.set()
        opening = self._opening = _Opening(image, answer, self.image_path)
        self.show_status(f"opening {image or session_file}…")
        self._update_actions()
        shown, autosave_dir = self.image_path, self.autosave_dir

        def load() -> _Loaded | None:  # in the worker
            if opening.dropped.is_set():
                return None
            read = session
            if session_file is not None:
                stamp = file_stamp(session_file)
                read = _SessionFile(session_file, load_session(session_file), stamp)
            path = image or read.session.image
            if not path:
                raise SessionReadError(f"session {read.path} names no image")
            path = os.path.abspath(path)
            try:
                raster, levels = load_for_display(
                    path, progress=lambda fraction: self.open_progress.emit(opening, path,
                                                                            fraction),
                    cancelled=opening.dropped.is_set)
            except ReadCancelled:  # superseded by a later open: dropped once back
                return None
            except ImageReadError as exc:
                if read is None or os.path.exists(path):
                    raise
                return _Loaded(path, None, None, read, missing=exc)
            lost = None if read is None else unusable_evidence(raster, read.session.params)
            if path == shown:  # its lines are the window's
                return _Loaded(path, raster, levels, read, lost_evidence=lost)
            try:
                return _Loaded(path, raster, levels, read, load_autosave(autosave_dir, path),
                               lost_evidence=lost)
            except SessionReadError as exc:
                return _Loaded(path, raster, levels, read, autosave_error=exc,
                               lost_evidence=lost)

        def current() -> bool:
            """True (once) if this open is still the latest: it now ends."""
            if opening.dropped.is_set() or self._opening is not opening:
                return False
            self._opening = None
            return True

        def loaded(result: _Loaded) -> None:
            if not current():
                return
            self._update_actions()
            if result.raster is None:
                self._locate_image(answer, result)
            else:
                self._install(result, answer == DISCARD and self.image_path == opening.asked_about)

        def failed(exc: BaseException) -> None:
            if current():
                self._update_actions()
                self.show_error(error_text(exc), "Cannot open session"
                                if isinstance(exc, SessionReadError) else "Cannot open image")

        self.jobs.submit(Job(load, loaded, failed))

    def _locate_image(self, answer: bool | str, missing: _Loaded) -> None:
        """Ask where the image of a session read is (it is not where the session says), and
        open it there; without an answer, say that it is not found."""
        name = os.path.basename(missing.image)
        path, _ = QFileDialog.getOpenFileName(
            self, f"Where is {name}? (the session's image is not found)",
            os.path.dirname(missing.session.path), IMAGE_FILTER)
        if path:
            self._load(answer, image=path, session=missing.session)
        else:
            self.show_error(error_text(missing.missing), "Cannot open image")

    def _install(self, result: _Loaded, discard: bool) -> None:
        """Show the image ``result`` loaded with its lines: the session's, else its autosave's
        (the open image's lines where it is the one open). The open image's lines are first
        dropped with their autosave where ``discard``, else flushed to it."""
        path, raster, session = result.image, result.raster, result.session
        if discard:
            self._discard_lines()
        else:
            self._flush_autosave()
        # The lines first: nothing of the window changes until they are known.
        restored = None  # the autosave the lines come from, if any
        if path == self.image_path:
            autosaved = self.model.lines  # now in its autosave
        else:
            self._claim_autosave(path)
            restored = self._restorable(path, result)
            autosaved = () if restored is None else restored.lines
        lines = autosaved if session is None else session.session.lines
        kept = self._keep_other_autosave(path, autosaved, lines)
        self.raster, self.image_path = raster, path
        self._image_levels = result.levels
        self.canvas.set_image(result.levels)
        self.controller.set_raster(raster)
        # Traces from now on: without the last image's evidence raster, with this image's
        # ground resolution where its georeferencing gives one.
        self.params_panel.set_image(image_ground_resolution(raster))
        self.trace_label.clear()  # the last image's trace
        self.trace_label.setToolTip(TRACE_TIP)
        if session is not None:
            self.session_path, self._session_stamp = session.path, session.stamp
            params = session.session.params
            self.params_panel.backend.setCurrentText(session.session.backend)
            if result.lost_evidence:
                self.show_error(f"{result.lost_evidence}; tracing on the image itself",
                                "Evidence raster")
                params = replace(params, evidence_path=None)
            self.params_panel.set_params(params)
            self._params_changed(self.params_panel.params())  # what it shows
        else:
            self.session_path, self._session_stamp = None, None
        self.model.reset(lines)
        self._add_recent(path)
        self._update_title()
        self._show_opened(path, session)
        source = session.session if session is not None else restored
        recorded = None if source is None else source.image_size
        if lines and recorded is not None and recorded != (raster.width, raster.height):
            self._show_box(f"{os.path.basename(path)} is {raster.width}×{raster.height} px, "
                           f"but its lines were drawn on it at {recorded[0]}×{recorded[1]} px "
                           "(was the file replaced, cropped or resized?): they may lie off "
                           "the image or beside what they trace.", "Image size changed",
                           QMessageBox.Icon.Warning)
        if kept:
            self._show_box(f"{os.path.basename(path)} had unsaved lines, which are kept in "
                           f"{kept}: open it as a session to get them back.",
                           "Autosaved lines kept", QMessageBox.Icon.Information)
        self.image_loaded.emit(path)

    def _show_opened(self, path: str, session: _SessionFile | None) -> None:
        """The status after an image opened: its size, bands and lines, and what to know."""
        raster = self.raster
        restored = f", {plural(len(self.model.lines), 'line')}" if self.model.lines else ""
        bands = f"tracing {raster.band_note}" if raster.band_note else \
            plural(raster.bands, "band")
        notes = list(raster.notes)
        if session is not None and os.path.abspath(session.session.image) != path:
            notes.append("its session names another place for it: save the session to "
                         "keep this one")
        if self._autosave_lock is None:
            notes.append("also open in another roadtracer window: not autosaved here, save a "
                         "session to keep its lines")
        try:
            unknown = ground_resolution_unknown(raster, self.params_panel.params())
        except BadParameter as exc:  # the georeferencing's is beyond any imagery: give one
            unknown = False
            notes.append(str(exc))
        if unknown:
            notes.append("ground resolution unknown: set it in Parameters for faster clicks")
        if reads_image_as_evidence(self.params_panel.params()):
            notes.append(EVIDENCE_ON_IMAGE)
        if self._image_levels.source is not None and raster.overview_factors() == []:
            notes.append(NO_OVERVIEWS_NOTE)
        self.show_status(
            f"opened {os.path.basename(path)} ({raster.width}×{raster.height} px, {bands}"
            f"{restored})" + "".join(f"; {note}" for note in notes),
            f"without it, {UNKNOWN_GROUND_NOTE}; {path}" if unknown else path)

    def _params_changed(self, params: TraceParams) -> None:
        """The panel's parameters changed: new traces take them (and the selection is traced
        again), the lines table gives lengths at their ground resolution; say so where score
        "evidence" now reads the image itself."""
        if reads_image_as_evidence(params) and not reads_image_as_evidence(self.controller.params):
            self.show_status(EVIDENCE_ON_IMAGE)
        self.lines_panel.set_metres_per_px(params.ground_resolution)
        self.controller.set_params(params)

    def _evidence_changed(self, path: str | None) -> None:
        """Drop the old evidence display; build the new one in the worker."""
        self._evidence_levels = None
        self.show_evidence_action.setEnabled(False)
        if self.show_evidence_action.isChecked():
            self.show_evidence_action.setChecked(False)
        if path is None:
            return

        def built(levels) -> None:
            if self.params_panel.evidence_path == path:  # still the chosen one
                self._evidence_levels = levels
                self.show_evidence_action.setEnabled(True)

        # The raster traced (resampled onto the image's grid where needed), read once: the
        # tracer's cache holds it.
        raster = self.raster
        self.jobs.submit(Job(lambda: display_levels(evidence_source(
            raster, TraceParams(evidence_path=path))), built,
            lambda exc: self.show_error(error_text(exc), "Evidence raster")))

    def _show_evidence_raster(self, shown: bool) -> None:
        levels = self._evidence_levels if shown else self._image_levels
        if levels is not None:
            self.canvas.set_image(levels, fit=False)

    def choose_evidence(self) -> None:
        if self.raster is None:
            self.show_status("open an image first")
            return
        path, _ = QFileDialog.getOpenFileName(self, "Evidence raster (the image's grid)",
                                              self._last_folder(), IMAGE_FILTER)
        if path:
            self.set_evidence_raster(path)

    def set_evidence_raster(self, path: str) -> bool:
        """Trace on the raster ``path`` instead of the image's pixels, if it can be read and has
        the image's size or can be resampled onto its grid (both georeferenced); otherwise say
        why and keep the current evidence."""
        if self.raster is None:
            self.show_error("open an image first, then its evidence raster", "Evidence raster")
            return False
        path = os.path.abspath(path)
        reason = unusable_evidence(self.raster, TraceParams(evidence_path=path))
        if reason:
            self.show_error(reason, "Evidence raster")
            return False
        self.params_panel.set_evidence(path)
        self.show_status(f"tracing on {os.path.basename(path)} instead of the image's pixels",
                         f"{path}; score 'evidence' reads it as a probability")
        return True

    def choose_surface_model(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Surface model", self._last_folder(),
                                              "ONNX models (*.onnx);;All files (*)")
        if path:
            self.set_surface_model(path)

    def set_surface_model(self, path: str) -> bool:
        """Trace from now on with the surface model ``path`` (lines already traced keep their
        course), if this program can run it; otherwise say why and keep the current one."""
        try:
            model = self.controller.set_surface_model(path)
        except TraceError as exc:
            self.show_error(str(exc), "Surface model")
            return False
        self.show_status(f"surface model {model.name}: new segments are traced with it")
        return True

    def recent_files(self) -> list[str]:
        value = self.settings.value("recent_files", [])
        return [value] if isinstance(value, str) else list(value or [])

    def _add_recent(self, path: str) -> None:
        recent = [path] + [p for p in self.recent_files() if p != path]
        self.settings.setValue("recent_files", recent[:MAX_RECENT])

    def _fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        for path in self.recent_files():
            action = self.recent_menu.addAction(path.replace("&", "&&"))  # no mnemonic
            action.triggered.connect(lambda _=False, p=path: self.open_image(p))
        if self.recent_menu.isEmpty():
            self.recent_menu.addAction("(none)").setEnabled(False)

    def _last_folder(self) -> str:
        return os.path.dirname(self.image_path) if self.image_path else ""

    def dragEnterEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if any(url.isLocalFile() for url in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802 (Qt override)
        """A dropped file opens: a session (``.json`` of a session: :func:`is_session_file`),
        GeoJSON lines (``.geojson``, ``.geojsonl``, ``.geojsons``, another ``.json``: imported
        on the open image, as File ▸ Import lines does), else an image."""
        paths = [url.toLocalFile() for url in event.mimeData().urls() if url.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            if is_session_file(paths[0]):
                self.open_session(paths[0])
            elif paths[0].lower().endswith((".geojson", ".geojsonl", ".geojsons", ".json")):
                if self.raster is None:
                    self.show_status("open an image first, then drop its lines (GeoJSON) on it")
                else:
                    self.import_lines(paths[0])
            else:
                self.open_image(paths[0])

    # -- sessions, autosave, export ------------------------------------------------------------
    def choose_session(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open session", self._last_folder(),
                                              SESSION_FILTER)
        if path:
            self.open_session(path)

    def open_session(self, path: str) -> bool:
        """Read a session in the worker and open its image with its lines and parameters (where
        the image is not found, a file dialog asks where it is). The unsaved lines are asked
        about first: saved, they may be this very session's, which is then read as saved.
        True if the reading started, or waits for a trace in flight (:meth:`_wait_for_traces`);
        a session that cannot be read is reported in a message box (nothing changes)."""
        if self._wait_for_traces(lambda: self.open_session(path), path):
            return True
        answer = self._confirm_replacing()
        if not answer:
            return False
        self._load(answer, session_file=path)
        return True

    def save_session(self, ask: bool = False) -> bool:
        """Save to the current session file (asking for one if there is none); True if saved."""
        if self._no_session_to_save():
            return False
        path = self.session_path
        if ask or path is None:
            suggestion = (os.path.splitext(self.image_path)[0] + ".roadtracer.json"
                          if self.image_path else "")
            path, _ = QFileDialog.getSaveFileName(self, "Save session", suggestion, SESSION_FILTER)
            if not path:
                return False
        return self.write_session(path)

    def _no_session_to_save(self) -> bool:
        """True (after a message) where no image is open: a session records its image."""
        if self.image_path is not None:
            return False
        self.show_error("no image is open: open one and trace its lines, then save the "
                        "session", "Cannot save session")
        return True

    def _not_a_file(self, path: str, title: str) -> bool:
        """True (after a message) where ``path`` exists but is no regular file: writing to a
        FIFO or device from the window would block it, or lose the lines."""
        target = os.path.realpath(path)
        if not os.path.exists(target) or os.path.isfile(target):
            return False
        self.show_error(f"cannot write {path}: it is not a regular file", title)
        return True

    def _replaces_an_input(self, path: str, title: str, session_too: bool) -> bool:
        """True (after a message) where writing ``path`` would replace a file the window
        reads: the image, its georeferencing sidecars, the evidence raster, the surface
        model, and with ``session_too`` the session file."""
        inputs = [self.params_panel.params().evidence_path, os.fspath(surface.MODEL_PATH)]
        if self.image_path is not None:
            inputs += [self.image_path, *sidecar_files(self.image_path)]
        if session_too:
            inputs.append(self.session_path)
        try:
            refuse_overwriting_input(path, inputs, "file")
        except TraceError as exc:
            self.show_error(str(exc), title)
            return True
        return False

    def write_session(self, path: str) -> bool:
        """Save the open image's lines and parameters as a session in ``path``; False (after a
        message) if that fails, or if no image is open; False too where ``path`` is the
        session file, changed on disk since it was read or saved here, and the user keeps it."""
        if self._no_session_to_save():
            return False
        if self._not_a_file(path, "Cannot save session") or \
                self._replaces_an_input(path, "Cannot save session", session_too=False):
            return False
        if path == self.session_path and not self._overwrite_changed_session(path):
            self.show_status(f"session not saved: {path} changed on disk")
            return False
        # Written here, the session being asked for now (a question's Save goes on with it):
        # thousands of lines take seconds, so the wait is shown before it starts.
        self.show_status(f"saving the session to {path}…")
        self.statusBar().repaint()
        QApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            write_session(path, self.image_path, self.model.lines, self.params_panel.params(),
                          self.params_panel.backend.currentText(), self._image_size(),
                          self.autosaver.encoder)
        except TraceError as exc:
            failure = str(exc)
        else:
            failure = None
        finally:
            QApplication.restoreOverrideCursor()
        if failure is not None:
            self.show_error(failure, "Cannot save session")
            return False
        self.session_path, self._session_stamp = path, file_stamp(path)
        self.model.mark_saved()
        self._update_title()
        self.show_status(f"session saved to {path}")
        return True

    def _overwrite_changed_session(self, path: str) -> bool:
        """Whether to write the session file ``path``: unchanged since it was read or saved
        here, or the user says to save over the change (another window's save, say)."""
        stamp = file_stamp(path)
        if stamp is None or stamp == self._session_stamp:
            return True
        return QMessageBox.question(
            self, "Session changed on disk", f"{path} changed on disk since this window read "
            "or saved it (another roadtracer window, or another program, saved it). Save over "
            "it? Save session as… keeps both.", QMessageBox.StandardButton.Save
            | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel) == QMessageBox.StandardButton.Save

    def _image_size(self) -> tuple[int, int] | None:
        return None if self.raster is None else (self.raster.width, self.raster.height)

    # Autosaves: the timer's are written off this thread (AutosaveWriter, the writes queue),
    # the others (flushing) at once; one at a time, the newest lines of an image winning.
    def _put_autosave(self) -> bool:
        """Leave the open image's lines to the autosave writer; False where this window does
        not autosave them (no image, or another window has its autosave)."""
        if self.image_path is None or self._autosave_lock is None:
            return False
        self.autosaver.put(self.image_path, self.model.lines, self.params_panel.params(),
                           self.params_panel.backend.currentText(), self._image_size())
        return True

    def autosave(self) -> None:
        """Write the open image's lines to its autosave file now, with any autosave waiting
        (failures in the status bar; retried at the next edit)."""
        self._autosave_timer.stop()
        self._put_autosave()
        self._write_autosaves()

    def _write_autosaves(self) -> None:
        """Write the autosaves waiting now (a failure in the status bar)."""
        try:
            self.autosaver.write_waiting()
        except TraceError as exc:
            self.show_status(f"autosave failed: {exc}")

    def _autosave_in_background(self) -> None:
        """The timer's autosave: written by a job of the writes queue (one waiting is
        enough: it writes the newest lines)."""
        if self._put_autosave() and not self.writes.pending:
            self.writes.submit(Job(self.autosaver.write_waiting, lambda _: None, lambda exc:
                                   self.show_status(f"autosave failed: {error_text(exc)}")))

    def _flush_autosave(self) -> None:
        """Write the autosaves waiting (the timer's too) now; a write in progress ends first."""
        if self._autosave_timer.isActive():
            self.autosave()
        else:
            self._write_autosaves()

    def _claim_autosave(self, image_path: str) -> None:
        """Lock the image's autosave for this window (the last image's is let go); where
        another roadtracer window holds it, this one does not autosave the image's lines
        (nor drops or moves its autosave)."""
        self._release_autosave()
        lock = QLockFile(autosave_path(self.autosave_dir, image_path) + ".lock")
        lock.setStaleLockTime(0)  # held as long as its window is open: stale once it is gone
        try:
            os.makedirs(self.autosave_dir, exist_ok=True)
        except OSError:
            pass  # the autosaves report it
        if lock.tryLock(0) or lock.error() != QLockFile.LockError.LockFailedError:
            self._autosave_lock = lock

    def _release_autosave(self) -> None:
        if self._autosave_lock is not None:
            self._autosave_lock.unlock()
            self._autosave_lock = None

    def _keep_other_autosave(self, image_path: str, autosaved: tuple, lines: tuple) -> str:
        """Where the image's autosaved lines, if they are not the ``lines`` about to be shown (a
        session's), were moved aside so that the next autosave does not overwrite them; ""
        if there was nothing to keep (or the autosave is another window's)."""
        if not autosaved or self._autosave_lock is None or same_lines(autosaved, lines):
            return ""
        try:
            return self.autosaver.keep(image_path)
        except TraceError as exc:
            self.show_status(f"autosave not kept: {exc}")
            return ""

    def _restorable(self, image_path: str, result: _Loaded) -> Session | None:
        """The image's autosave read with it, if any; one that cannot be read is reported (and
        set aside where it is this window's)."""
        error = result.autosave_error
        if error is None:
            return result.autosave
        if self._autosave_lock is not None:
            error = set_aside_bad_autosave(self.autosave_dir, image_path, error)
        QMessageBox.warning(self, "Autosave not restored", str(error))
        return None

    def confirm_discard(self, discard_now: bool = True) -> bool | str:
        """Before the lines are replaced: where they have unsaved changes (as the title says),
        True to go on (after saving if asked), False to stay. Where the user discards them,
        they are dropped now, or with ``discard_now`` False left as they are and
        :data:`DISCARD` returned: the caller drops them (:meth:`_discard_lines`) once their
        replacement is there (an image that fails to open then changes nothing)."""
        if not self.model.dirty:
            return True
        count = len(self.model.lines)
        if self.session_path is not None and count:
            unsaved = (f"The lines have changes not saved in {os.path.basename(self.session_path)}"
                       f" ({count} line{'s' if count > 1 else ''} in all). Save them first?")
        else:
            unsaved = ("1 traced line is not saved in a session. Save it first?" if count == 1
                       else f"{count} traced lines are not saved in a session. Save them first?"
                       if count else
                       "All lines were deleted: save the session without them first?")
        answer = QMessageBox.question(
            self, "Unsaved changes", unsaved, QMessageBox.StandardButton.Save
            | QMessageBox.StandardButton.Discard | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Save)
        if answer == QMessageBox.StandardButton.Save:
            return self.save_session()
        if answer == QMessageBox.StandardButton.Discard:
            if not discard_now:
                return DISCARD
            self._discard_lines()
            return True
        return False

    def _discard_lines(self) -> None:
        """Drop the open image's lines and their autosave (the user chose to)."""
        self.model.reset()
        self._autosave_timer.stop()
        if self.image_path is not None and self._autosave_lock is not None:
            self.autosaver.remove(self.image_path)

    def choose_import(self) -> None:
        if self.raster is None:
            self.show_status("open an image first")
            return
        # Reviewing a batch: the folder of the last import, with this image's output chosen.
        folder = self._import_folder or self._last_folder()
        named = os.path.join(folder, Path(self.image_path).stem + ".geojson")
        path, _ = QFileDialog.getOpenFileName(
            self, "Import lines", named if os.path.isfile(named) else folder,
            "GeoJSON (*.geojson *.json *.geojsonl *.geojsons)")
        if path:
            self._import_folder = os.path.dirname(path)
            self.import_lines(path)

    def import_lines(self, path: str) -> bool:
        """Read a GeoJSON file's lines on this image (core.vectors.read_lines) and trace them
        (app.imports.ImportRunner), both in the worker: the window stays responsive, and Esc,
        another image or closing the window drop the import. True if the reading started; a
        file that cannot be read, or has no line on this image, is then reported in a message
        box. Like imports being traced, files read meanwhile are imported too, each on its
        own."""
        if self.raster is None:
            self.show_status("open an image first")
            return False
        raster, image_name = self.raster, os.path.basename(self.image_path)
        name = os.path.basename(path)
        imports = self.controller.imports
        reading = imports.reading(name)
        # An import ends the line being drawn when chosen; a click made while the file is read
        # draws on (the lines join the model only once traced).
        self.controller.line_drawing.stop()

        def read():  # in the worker; it stops between two features once the import is dropped
            if not reading.live():  # dropped while it waited: nothing read
                return None
            return read_lines(path, raster, image_name, stop=lambda: not reading.live())

        def done(result) -> None:
            if imports.end_reading(reading):
                self._trace_lines_read(*result, name, image_name)
            self._update_actions()

        def failed(exc: BaseException) -> None:
            if imports.end_reading(reading):  # else dropped: ReadStopped, or a late error
                self.show_error(error_text(exc), "Cannot import lines")
            self._update_actions()

        self.jobs.submit(Job(read, done, failed))
        self.show_status(f"reading {name}… (Esc cancels)")
        self._update_actions()
        return True

    def _trace_lines_read(self, lines, failures, name: str, image_name: str) -> None:
        """Trace the ``lines`` read from the file ``name`` on the image ``image_name``, or say
        why there are none; the features skipped are listed in the messages log, and the
        progress and end of the import also say how many lines are of a kind that is no line
        kind (:func:`app.imports.unknown_kinds`) and how they are traced."""
        skipped = [skipped_feature(failure, image_name) for failure in failures]
        if not lines:
            self.show_error(f"no line of {name} lies on this image{': ' if skipped else ''}"
                            f"{skipped[0] if skipped else ''}", "Nothing to import")
            return
        notes = []
        if skipped:
            notes.append(f"{plural(len(skipped), 'feature')} skipped ({skipped[0]})")
            self.show_status(f"{name}: {notes[0]}", "; ".join(skipped[1:MAX_SKIPPED_LISTED]))
        kind = self.controller.kind
        notes.append(unknown_kind_note(unknown_kinds(lines), name, kind))
        notes.append(edited_note(lines, name))
        self.controller.imports.start(lines, name, kind, "; ".join(filter(None, notes)))

    def choose_export(self) -> None:
        if self.raster is None:
            self.show_status("open an image first")
            return
        if not self.model.lines:
            self.show_status("nothing to export: trace a line first")
            return
        suggestion = os.path.splitext(self.image_path)[0] + ".geojson"
        filters = {EXPORT_PIXELS: "wgs84"} if coordinate_space(self.raster) == "pixel" else \
            {EXPORT_LONLAT: "wgs84", EXPORT_SOURCE: "source"}
        path, chosen = QFileDialog.getSaveFileName(self, "Export GeoJSON", suggestion,
                                                   ";;".join(filters), next(iter(filters)))
        if path:
            self.export_geojson(path, filters.get(chosen, "wgs84"))

    def export_geojson(self, path: str, crs: str = "wgs84") -> bool:
        """Export the lines to ``path`` in the worker (:func:`app.files.export_lines`;
        "exporting…" in the status bar meanwhile); True if the export started. A path that
        cannot be written to is refused at once, a failing export reported once it ends (in a
        message box both)."""
        if self._not_a_file(path, "Cannot export") or \
                self._replaces_an_input(path, "Cannot export", session_too=True):
            return False
        lines, raster = self.model.lines, self.raster
        exported = f"exported {plural(len(lines), 'line')} to {path}"

        def done(_) -> None:
            if coordinate_space(raster, crs) == "pixel":
                georef = raster.georef
                self.show_status(f"{exported} in pixel coordinates: the image has "
                                 + ("no georeferencing" if georef is None else
                                    f"no map CRS ({georef.source}); add a .prj file beside it"))
            else:
                self.show_status(exported)

        self.jobs.submit(Job(lambda: export_lines(path, lines, raster, crs), done,
                             lambda exc: self.show_error(error_text(exc), "Cannot export"),
                             awaited=True))
        self.show_status(f"exporting {plural(len(lines), 'line')} to {path}…")
        return True

    def choose_training_export(self) -> None:
        if self.raster is None:
            self.show_status("open an image first")
            return
        if not any(line.kind == "road" for line in self.model.lines):
            self.show_status("no road line to export: trace and fix some first")
            return
        folder = QFileDialog.getExistingDirectory(self, "Export training cases (a new or empty "
                                                  "folder)", self._last_folder())
        if folder:
            self.export_training_cases(folder)

    def export_training_cases(self, folder: str) -> bool:
        """Write the road lines as a training set into the new or empty ``folder``
        (:func:`core.teaching.training_set`); False (and a message box) if that fails."""
        roads = [line.polyline for line in self.model.lines if line.kind == "road"]
        try:
            check_new_folder(folder)
            sources, cases, parts = training_set({self.image_path: (self.raster, roads)})
            write_training_set(folder, sources, cases, parts)
        except TraceError as exc:
            self.show_error(str(exc), "Cannot export training cases")
            return False
        self.show_status(f"{plural(len(cases), 'training case')} written to {folder}",
                         "teach the surface model with scripts/train_surface_model.py --roads "
                         "FOLDER --cases FOLDER/cases.json --init-from … (docs/ACCURACY.md)")
        return True

    # -- closing -------------------------------------------------------------------------------
    def closeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if self._closing_waits:  # not in the lines yet (asked about once it is), or not written
            event.ignore()
            self._close_once_traced = True
            self._open_once_traced = None
            self.show_status("closing once the trace in progress lands (Esc cancels the "
                             "segment being drawn)" if self.controller.work_in_flight else
                             "closing once the export in progress is written")
            return
        if not self.confirm_discard():
            event.ignore()
            return
        self._flush_autosave()
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.saveState())
        self.shutdown()
        event.accept()

    @property
    def _closing_waits(self) -> bool:
        """Whether closing waits: for a trace in flight, or an export the user asked for."""
        return self.controller.work_in_flight or self.jobs.awaiting

    def _go_on_once_traced(self) -> None:
        """Open or close, as asked while a trace (for closing, an export too) was in flight,
        once none is (from the event loop)."""
        if self._open_once_traced is not None and not self.controller.work_in_flight:
            QTimer.singleShot(0, self._open_once_traced)
            self._open_once_traced = None
        if self._close_once_traced and not self._closing_waits:
            self._close_once_traced = False
            QTimer.singleShot(0, self.close)

    def shutdown(self) -> None:
        """Stop the worker (waiting for a running job: a file being read stops within one
        feature; a trace, which cannot stop midway, is not waited for) and the autosave writer,
        and let go of the autosave; safe to call twice."""
        self._autosave_timer.stop()
        self.controller.cancel_imports()
        self.jobs.shutdown()
        self.writes.shutdown()
        self._release_autosave()


def installed_licences() -> list[Path]:
    """The licence files in the installed distribution's metadata (none where it is not
    installed, or lists no files)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        installed = distribution("roadtracer")
    except PackageNotFoundError:
        return []
    return [Path(installed.locate_file(file)) for file in installed.files or []
            if "licenses" in file.parts and file.name.startswith("LICENSE")]


def run_app(argv: list[str]) -> int:
    """Start the application; ``argv`` may hold one image, folder or session path.

    Where a trace still runs in the background at the end (the window closed while it ran),
    it is waited for (:data:`EXIT_TRACE_WAIT_S` at most); if it still runs then, the process
    ends at once with the application's exit code: ending the interpreter while the engine
    runs aborts it."""
    app = QApplication.instance() or QApplication([sys.argv[0]])
    QCoreApplication.setOrganizationName("roadtracer")
    QCoreApplication.setApplicationName("roadtracer")
    window = MainWindow()
    window.show()
    path = argv[0] if argv else None
    if path and path.lower().endswith(".json"):
        window.open_session(path)
    else:
        window.open_initial(path)
    code = app.exec()
    if not window.jobs.wait_for_trace(EXIT_TRACE_WAIT_S):
        for stream in (sys.stdout, sys.stderr):  # None without a console (pythonw)
            if stream is not None:
                stream.flush()
        os._exit(code)
    return code
