"""Dock panels: tracing parameters and the list of traced lines."""

from __future__ import annotations

import heapq
import math
import os
from contextlib import contextmanager

from PySide6.QtCore import (
    QAbstractTableModel,
    QEvent,
    QItemSelectionModel,
    QModelIndex,
    QSignalBlocker,
    QSize,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QPainter, QValidator
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.model import LINE_KINDS, Line, LinesModel, length_text
from app.params import (
    AUTO_POINTS_HALFWIDTH,
    PANEL_BACKENDS,
    PARAM_RANGES,
    ParamRange,
    reads_image_as_evidence,
)
from app.tracing import TracingController
from core.scores import SCORE_KINDS
from core.tracer import TraceParams

#: What the panel says where score "evidence" reads the image itself (no evidence raster).
EVIDENCE_ON_IMAGE = ("score 'evidence' reads the image's own band 0 as a road probability: "
                     "choose an evidence raster (Parameters ▸ Evidence) unless the image is one")
#: The ground resolution field's tooltip where the image's georeferencing gives it.
IMAGE_GROUND_TIP = ("From the image's georeferencing: {ground:g} m/px, used for this image. "
                    "The value you give here applies to images whose georeferencing does not "
                    "say (a PNG or JPEG).")
#: Keys that page (a spin box's step of ten, the lines table's scroll), not the window's
#: previous and next image where a field or the table has the focus.
PAGE_KEYS = (Qt.Key.Key_PageUp, Qt.Key.Key_PageDown)
#: Keys that end the editing of a line's name, not the window's Finish line.
ENTER_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)
COMMAND_MODIFIERS = (Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier
                     | Qt.KeyboardModifier.MetaModifier)


def keep_key(event, keys, text: bool = False) -> bool:
    """Keep a key from the window's shortcuts: accept ``event`` where it is the
    ShortcutOverride of a key pressed without Ctrl, Alt or Meta that is one of ``keys`` or,
    with ``text``, types text (the focus widget then gets the key press). Whether it did."""
    if event.type() != QEvent.Type.ShortcutOverride or event.modifiers() & COMMAND_MODIFIERS:
        return False
    if event.key() in keys or (text and event.text().isprintable() and event.text() != ""):
        event.accept()
        return True
    return False


class _AutoOrLeast:
    """Spin box behaviour for an automatic parameter: 0 is "auto", and the values between 0
    and ``least`` are not offered (typed, they become ``least`` once the edit ends; a step
    skips over them)."""

    least: float = 0

    def set_least(self, least: float) -> None:
        """Offer values from ``least`` on; a value now below it becomes ``least``."""
        self.least = least
        if self._in_gap(self.value()):
            self.setValue(least)

    def _in_gap(self, value: float) -> bool:
        return 0 < value < self.least

    def validate(self, text: str, pos: int):  # Qt override
        result = super().validate(text, pos)
        if result[0] == QValidator.State.Acceptable and self._in_gap(self.valueFromText(text)):
            return QValidator.State.Intermediate, text, pos
        return result

    def fixup(self, text: str) -> str:  # Qt override
        return self.textFromValue(self.least) if self._in_gap(self.valueFromText(text)) \
            else text

    def stepBy(self, steps: int) -> None:  # noqa: N802 (Qt override)
        if self._in_gap(self.value() + steps * self.singleStep()):
            self.setValue(self.least if steps > 0 else 0)
        else:
            super().stepBy(steps)


class _AutoSpinBox(_AutoOrLeast, QSpinBox):
    pass


class _AutoDoubleSpinBox(_AutoOrLeast, QDoubleSpinBox):
    pass


def _spin_box(limits: ParamRange, suffix: str = "", value: float | None = None):
    """A spin box over ``limits``; a parameter that may be automatic shows 0 as "auto"."""
    low = 0 if limits.auto else limits.low
    if limits.decimals == 0:
        box = (_AutoSpinBox if limits.auto else QSpinBox)(minimum=int(low),
                                                          maximum=int(limits.high))
    else:
        box = (_AutoDoubleSpinBox if limits.auto else QDoubleSpinBox)(
            minimum=low, maximum=limits.high, decimals=limits.decimals)
    if limits.auto:
        box.least = limits.low
    box.setSuffix(suffix)
    if limits.auto:
        box.setSpecialValueText("auto")
    if value is not None:
        box.setValue(value)
    box.setKeyboardTracking(False)  # a value typed counts once entered, not digit by digit
    return box


class ElidedLabel(QLabel):
    """A one-line label that draws as much of its text as fits, eliding the middle, so that it
    never widens its panel: it asks for no more room than its first text needs, and may
    shrink to nothing; :meth:`text` stays whole."""

    def __init__(self, text: str, parent=None) -> None:
        super().__init__(text, parent)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.preferred_width = super().sizeHint().width()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        hint = super().sizeHint()
        return QSize(min(hint.width(), self.preferred_width), hint.height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        return QSize(0, super().minimumSizeHint().height())

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt override)
        area = self.contentsRect()
        painter = QPainter(self)
        painter.drawText(area, self.alignment(), self.fontMetrics().elidedText(
            self.text(), Qt.TextElideMode.ElideMiddle, area.width()))
        painter.end()


class ParamsPanel(QWidget):
    """Tracing parameters; 0 in guides, points and half-width means "scale with the distance".

    Signals
    -------
    params_changed(TraceParams) : emitted shortly after the user changes a value (a number
        typed counts once entered: Enter, leaving the field; an arrow step at once), and at
        once when another image opens (:meth:`set_image`).
    backend_changed(str) : "auto", "cpu" or "gpu".
    evidence_requested() : the user asked to choose an evidence raster.
    evidence_changed(str or None) : the evidence raster changed (None: the image itself).
    """

    params_changed = Signal(object)
    backend_changed = Signal(str)
    evidence_requested = Signal()
    evidence_changed = Signal(object)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        defaults = TraceParams()
        self.guides = _spin_box(PARAM_RANGES["guides"])
        self.guides.setToolTip("Number of guides m across the segment; more guides follow "
                               "tighter curves but trace slower. Auto: one guide every ~20 px.")
        self.points = _spin_box(PARAM_RANGES["points"])
        self.points.setToolTip("Candidate points d on each guide. Auto: 1.5 px apart over the "
                               "whole half-width.")
        self.halfwidth = _spin_box(PARAM_RANGES["halfwidth"], " px")
        self._fit_halfwidth()
        self.halfwidth.setToolTip("How far (px) the path may stray to either side of the straight "
                                  "line between the clicks. Auto: 25 % of the distance, 8–150 px, "
                                  "widened 1.6× where the best path touches the corridor's edge.")
        self.max_angle = _spin_box(PARAM_RANGES["max_angle"], " °", defaults.max_angle)
        self.max_angle.setToolTip("Largest turn allowed at a guide. Small values give smooth "
                                  "roads; raise it for winding rivers.")
        self.sigma = _spin_box(PARAM_RANGES["sigma"], " px", defaults.sigma)
        self.sigma.setSingleStep(0.25)
        self.sigma_tip = ("Gaussian scale σ of the image gradient: larger smooths noise and "
                          "fine texture.")
        self.sigma.setToolTip(self.sigma_tip)
        self.ground = _spin_box(PARAM_RANGES["ground_resolution"], " m/px")
        self.ground.setSingleStep(0.1)
        self.ground_tip = ("The image's metres per pixel, for an image whose georeferencing "
                           "does not say (a PNG or JPEG). On imagery of 0.3 m/px or coarser "
                           "the surface model reads larger windows at full resolution; "
                           "imagery finer than 0.16 m/px (drone imagery) it reads on "
                           "block means of at least 0.16 m. "
                           "Auto: unknown. Where the georeferencing gives it, the field shows "
                           "the image's own, greyed out.")
        self.ground.setToolTip(self.ground_tip)
        #: The image's own ground resolution, used instead of the field's where not None.
        self.image_ground: float | None = None
        self._own_ground = 0.0  # the user's value while the image's is shown
        self.score = QComboBox()
        for name, kind in SCORE_KINDS.items():
            self.score.addItem(name)
            self.score.setItemData(self.score.count() - 1, kind.summary,
                                   Qt.ItemDataRole.ToolTipRole)
        self.score.setCurrentText(defaults.score)
        self.score.setToolTip("What makes a link good: " + "; ".join(
            f"{name}: {kind.summary}" for name, kind in SCORE_KINDS.items()))
        self.backend = QComboBox()
        self.backend.addItems(PANEL_BACKENDS)
        self.backend.setToolTip("auto: the GPU when CUDA is available, else the CPU. The status "
                                "bar says which backend runs and why.")
        self.evidence_path: str | None = None
        self.evidence_label = ElidedLabel("the image")
        self.choose_evidence = QPushButton("Choose…", enabled=False)  # once an image is open
        self.choose_evidence.setAccessibleName("Choose evidence raster…")
        self.choose_evidence.setToolTip(
            "Trace on a raster of the image's size (or a georeferenced one, resampled onto "
            "the image's grid) instead of the image itself, e.g. a segmentation model's "
            "road-probability map (score 'evidence': cost 1 − p).")
        self.clear_evidence = QPushButton("Clear")
        self.clear_evidence.setAccessibleName("Clear evidence raster")
        self.clear_evidence.setToolTip("Trace on the image's own pixels again.")
        evidence = QHBoxLayout()
        evidence.setContentsMargins(0, 0, 0, 0)
        for widget in (self.evidence_label, self.choose_evidence, self.clear_evidence):
            evidence.addWidget(widget)
        evidence.setStretch(0, 1)
        self._show_evidence(None)
        form = QFormLayout(self)
        for label, widget in (("Guides", self.guides), ("Points per guide", self.points),
                              ("Half-width", self.halfwidth), ("Max angle", self.max_angle),
                              ("σ", self.sigma), ("Ground resolution", self.ground),
                              ("Score", self.score), ("Backend", self.backend),
                              ("Evidence", evidence)):
            form.addRow(label, widget)
            if isinstance(widget, QWidget):  # a combo box is else named by its value
                widget.setAccessibleName(label)
        self.choose_evidence.clicked.connect(self.evidence_requested)
        self.clear_evidence.clicked.connect(lambda: self.set_evidence(None))
        self._debounce = QTimer(self, singleShot=True, interval=250)
        self._debounce.timeout.connect(lambda: self.params_changed.emit(self.params()))
        for spin in (self.guides, self.points, self.halfwidth, self.max_angle, self.sigma,
                     self.ground):
            spin.valueChanged.connect(self._debounce.start)
        self.points.valueChanged.connect(self._fit_halfwidth)
        self.score.currentTextChanged.connect(self._debounce.start)
        self.score.currentTextChanged.connect(lambda _: self._show_evidence(self.evidence_path))
        self.backend.currentTextChanged.connect(self.backend_changed)

    def event(self, event) -> bool:
        """A field keeps its keys: letters (a combo box's search) and PgUp, PgDown (a spin
        box's step of ten) are not the window's one-key shortcuts while it has the focus."""
        return keep_key(event, PAGE_KEYS, text=True) or super().event(event)

    def params(self) -> TraceParams:
        """The parameters traced with: the image's own ground resolution where it has one."""
        ground = self.image_ground if self.image_ground is not None else self.ground.value()
        return TraceParams(guides=self.guides.value() or None, points=self.points.value() or None,
                           halfwidth=self.halfwidth.value() or None,
                           max_angle=self.max_angle.value(), sigma=self.sigma.value(),
                           score=self.score.currentText(), evidence_path=self.evidence_path,
                           ground_resolution=ground or None)

    def _fit_halfwidth(self) -> None:
        """Offer the half-widths the points per guide allow: automatic points need at least
        :data:`app.params.AUTO_POINTS_HALFWIDTH`."""
        self.halfwidth.set_least(PARAM_RANGES["halfwidth"].low if self.points.value()
                                 else AUTO_POINTS_HALFWIDTH)

    def set_image(self, ground: float | None) -> None:
        """A new image opened: trace on its own pixels (the evidence raster cleared) with its
        ground resolution ``ground`` where its georeferencing gives one (the field shows it
        greyed out; the user's value comes back for an image without one). Emits
        ``params_changed`` at once (``evidence_changed`` first if the evidence changed)."""
        self._debounce.stop()
        self.choose_evidence.setEnabled(True)
        self._show_evidence(None)
        if self.image_ground is None:
            self._own_ground = self.ground.value()
        self.image_ground = ground
        with QSignalBlocker(self.ground):
            self.ground.setValue(self._own_ground if ground is None else ground)
        self.ground.setEnabled(ground is None)
        self.ground.setSuffix(" m/px" if ground is None else " m/px (image's)")
        self.ground.setToolTip(self.ground_tip if ground is None
                               else IMAGE_GROUND_TIP.format(ground=ground))
        self.params_changed.emit(self.params())

    def set_evidence(self, path: str | None) -> None:
        """Trace on the raster ``path`` (None: the image itself); emits ``params_changed``."""
        self._show_evidence(path)
        self._debounce.start()

    def _show_evidence(self, path: str | None) -> None:
        changed = path != self.evidence_path
        self.evidence_path = path
        self.evidence_label.setText("the image" if path is None else os.path.basename(path))
        self.evidence_label.setToolTip(path or (
            EVIDENCE_ON_IMAGE if reads_image_as_evidence(self.params())
            else "Links are scored on the image's own pixels."))
        self.clear_evidence.setEnabled(path is not None)
        self._show_sigma()
        if changed:
            self.evidence_changed.emit(path)

    def _show_sigma(self) -> None:
        """σ is a parameter of the score kinds that read the gradient only: greyed out, with a
        tooltip saying so, for the others (the one traced: ``centre`` for ``surface`` on an
        evidence raster)."""
        traced = self.params().traced_score
        uses_gradient = SCORE_KINDS[traced].uses_gradient
        self.sigma.setEnabled(uses_gradient)
        self.sigma.setToolTip(self.sigma_tip if uses_gradient else
                              f"Score '{traced}' does not read the image gradient: σ does not "
                              "change its lines (it sets the gradient-based scores' scale: "
                              + ", ".join(name for name, kind in SCORE_KINDS.items()
                                          if kind.uses_gradient) + ").")

    def set_params(self, params: TraceParams) -> None:
        """Show parameters (from a session, checked by :func:`app.params.params_from_dict`)
        without emitting ``params_changed``."""
        blockers = [QSignalBlocker(widget) for widget in (
            self.guides, self.points, self.halfwidth, self.max_angle, self.sigma, self.ground,
            self.score)]
        try:
            self.guides.setValue(params.guides or 0)
            self.points.setValue(params.points or 0)
            self._fit_halfwidth()
            self.halfwidth.setValue(params.halfwidth or 0.0)
            self.max_angle.setValue(params.max_angle)
            self.sigma.setValue(params.sigma)
            if self.image_ground is None:  # else the image's own shows, and applies
                self.ground.setValue(params.ground_resolution or 0.0)
            self.score.setCurrentText(params.score)
        finally:
            for blocker in blockers:
                blocker.unblock()
        self._show_evidence(params.evidence_path)


def row_texts(line: Line, metres_per_px: float | None = None) -> tuple[str, str, str, str]:
    """What the lines table shows of ``line``, column by column: name, kind, length
    (:func:`length_text`) and mean score per px ("—" where no segment is traced)."""
    score = line.score_per_px
    return (line.name, line.kind, length_text(line.length, metres_per_px),
            "—" if math.isnan(score) else f"{score:.3f}")


class LinesTableModel(QAbstractTableModel):
    """The lines as the rows of the lines table, in the order of the :class:`LinesModel`.

    A row holds only its line: what a cell shows is read from the line when the view asks,
    which it does for the rows in sight, so thousands of lines cost no more than those rows.
    :meth:`follow` reports to the view only what changed; renaming and hiding (the name's tick
    box) are edits of the lines model.
    """

    COLUMNS = ("Name", "Kind", "Length", "Score/px")
    COLUMN_TIPS = (
        "The line's name (double-click to rename); the tick box shows or hides it",
        "Road or river (double-click, or Return, Space or F2, to switch: the line is traced "
        "again as such)",
        "Length of the line: in metres where the imagery's ground resolution is known (its "
        "georeferencing's, at the image's middle, or Parameters ▸ Ground resolution), else "
        "in pixels",
        "Mean link score per pixel of the line's traced segments (straight ones not counted): "
        "higher, that is closer to 0, is better")
    NAME_HINT = "Double-click to rename; untick to hide"
    KIND_HINT = "Double-click, or Return, Space or F2, to switch between road and river"
    FLAGS = Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsEnabled
    NAME_FLAGS = FLAGS | Qt.ItemFlag.ItemIsEditable | Qt.ItemFlag.ItemIsUserCheckable
    NUMBER_ALIGNMENT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter

    def __init__(self, lines_model: LinesModel, parent=None) -> None:
        super().__init__(parent)
        self.lines_model = lines_model
        #: The imagery's metres per pixel (None: not known, lengths in pixels).
        self.metres_per_px: float | None = None
        self._lines: list[Line] = []  # the line of every row, top to bottom
        self._row_of: dict[int, int] = {}  # the row of every line id

    def line_at(self, row: int) -> Line | None:
        return self._lines[row] if 0 <= row < len(self._lines) else None

    def row_of(self, line_id: int | None) -> int | None:
        return self._row_of.get(line_id)

    # -- what the view reads and writes ---------------------------------------------------------
    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: B008, N802 (Qt override)
        return 0 if parent.isValid() else len(self._lines)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: B008, N802 (Qt override)
        return 0 if parent.isValid() else len(self.COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation,  # noqa: N802 (Qt override)
                   role: int = Qt.ItemDataRole.DisplayRole):
        if orientation == Qt.Orientation.Horizontal:
            if role == Qt.ItemDataRole.DisplayRole:
                return self.COLUMNS[section]
            if role == Qt.ItemDataRole.ToolTipRole:
                return self.COLUMN_TIPS[section]
        return None

    def flags(self, index: QModelIndex) -> Qt.ItemFlag:
        return self.NAME_FLAGS if index.column() == 0 else self.FLAGS

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        line, column = self._lines[index.row()], index.column()
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            return row_texts(line, self.metres_per_px)[column]
        if role == Qt.ItemDataRole.ToolTipRole and column <= 1:
            return f"{line.name}\n{self.NAME_HINT}" if column == 0 else self.KIND_HINT
        if role == Qt.ItemDataRole.CheckStateRole and column == 0:
            return Qt.CheckState.Checked if line.visible else Qt.CheckState.Unchecked
        if role == Qt.ItemDataRole.TextAlignmentRole and column >= 2:
            return self.NUMBER_ALIGNMENT
        return None

    def setData(self, index: QModelIndex, value,  # noqa: N802 (Qt override)
                role: int = Qt.ItemDataRole.EditRole) -> bool:
        """A tick (shows or hides the line) or a new name (stripped; an empty one, or the same,
        is refused) in the name column, made an edit of the lines model."""
        line = self.line_at(index.row())
        if line is None or index.column() != 0:
            return False
        if role == Qt.ItemDataRole.CheckStateRole:
            visible = Qt.CheckState(value) == Qt.CheckState.Checked
            if visible != line.visible:
                self.lines_model.set_visible(line.id, visible)
            return True
        if role != Qt.ItemDataRole.EditRole:
            return False
        name = str(value).strip()
        if not name or name == line.name:
            return False
        self.lines_model.rename(line.id, name)
        return True

    # -- following the lines model --------------------------------------------------------------
    def follow(self) -> list[int]:
        """Bring the rows up to date with the lines model: rows inserted for new lines, removed
        for deleted ones, and changed for lines an edit replaced (lines are immutable: an
        unchanged one is the same object); the others are not touched. Returns the rows of
        the new and replaced lines, top to bottom."""
        lines = self.lines_model.lines
        added = self._sync_rows(lines)
        replaced = [row for row, (shown, line) in enumerate(zip(self._lines, lines, strict=True))
                    if shown is not line]
        for row in replaced:
            self._lines[row] = lines[row]
        for start, count in _runs(replaced):
            self.dataChanged.emit(self.index(start, 0),
                                  self.index(start + count - 1, len(self.COLUMNS) - 1))
        return sorted(added + replaced)

    def _sync_rows(self, lines: tuple[Line, ...]) -> list[int]:
        """Insert and remove rows so that they stand for the lines of ``lines`` (by id), in
        this order; returns the rows inserted."""
        old = [line.id for line in self._lines]
        ids = [line.id for line in lines]
        if old == ids:
            return []
        keep, had = set(ids), set(old)
        if [i for i in old if i in keep] != [i for i in ids if i in had]:  # reordered: start over
            self.beginResetModel()
            self._lines = list(lines)
            self._row_of = {line_id: row for row, line_id in enumerate(ids)}
            self.endResetModel()
            return list(range(len(lines)))
        root = QModelIndex()
        for start, count in reversed(_runs([row for row, i in enumerate(old) if i not in keep])):
            self.beginRemoveRows(root, start, start + count - 1)
            del self._lines[start:start + count]
            self.endRemoveRows()
        added = [row for row, i in enumerate(ids) if i not in had]
        for start, count in _runs(added):
            self.beginInsertRows(root, start, start + count - 1)
            self._lines[start:start] = lines[start:start + count]
            self.endInsertRows()
        self._row_of = {line_id: row for row, line_id in enumerate(ids)}
        return added


class LinesTable(QTableView):
    """The lines table; while it has the focus, PgUp and PgDown scroll it (not the window's
    shortcuts for the previous and next image), and Enter ends the editing of a name (not the
    window's Finish line). Tab leaves it (not to the next cell).

    Signals
    -------
    kind_key(int) : Return, Enter, Space or F2 on the Kind cell of this row.
    """

    KIND_COLUMN = LinesTableModel.COLUMNS.index("Kind")
    KIND_KEYS = (*ENTER_KEYS, Qt.Key.Key_Space, Qt.Key.Key_F2, Qt.Key.Key_Select)

    kind_key = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setTabKeyNavigation(False)

    def event(self, event) -> bool:
        editing = self.state() == QAbstractItemView.State.EditingState
        return keep_key(event, PAGE_KEYS + (ENTER_KEYS if editing else ())) \
            or super().event(event)

    def keyPressEvent(self, event) -> None:  # noqa: N802 (Qt override)
        index = self.currentIndex()
        if event.key() in self.KIND_KEYS and index.column() == self.KIND_COLUMN \
                and not event.modifiers() & COMMAND_MODIFIERS and not event.isAutoRepeat():
            self.kind_key.emit(index.row())
            return
        super().keyPressEvent(event)


class LinesPanel(QWidget):
    """The traced lines: name (editable; checkbox = visible), kind, length, mean score per px.

    Double-clicking a kind, or Return, Space or F2 on it, switches it between road and river.

    The table is a view of a :class:`LinesTableModel`, which follows the lines model
    reporting only what changed, and whose cells are read only as they are shown: an edit
    among thousands of lines costs milliseconds, and so does loading them but for the one
    pass over their lengths and scores that sizes the columns. The kind, length and score
    columns are sized by the panel (widened to fit the rows of new or changed lines, measuring
    only their longest texts), never re-measured over all rows by the header.
    """

    COLUMNS = LinesTableModel.COLUMNS
    COLUMN_TIPS = LinesTableModel.COLUMN_TIPS
    #: At most this many distinct texts of a column are measured when fitting its width.
    FIT_SAMPLE = 8

    def __init__(self, model: LinesModel, controller: TracingController, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        self.controller = controller
        self._selecting = False  # the panel, not the user, is changing the table's selection
        self.new_kind = QComboBox()
        self.new_kind.addItems(LINE_KINDS)
        self.new_kind.setToolTip("Kind given to the next line you trace")
        self.new_kind.setAccessibleName("New line kind")
        self.new_kind.currentTextChanged.connect(lambda kind: setattr(controller, "kind", kind))
        self.delete_button = QPushButton("Delete")
        self.delete_button.setToolTip("Delete the selected line (Del)")
        self.delete_button.clicked.connect(self.delete_selected)
        self.table_model = LinesTableModel(model, self)
        self.table = LinesTable()
        self.table.setAccessibleName("Lines")
        self.table.setModel(self.table_model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        # Not ResizeToContents: that re-measures every row of the column whenever rows change
        # (seconds per edit with a few hundred lines); _fit_columns sizes them instead.
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in range(1, len(self.COLUMNS)):
            self.table.setColumnWidth(column, header.sectionSizeHint(column))
        self.table.doubleClicked.connect(
            lambda index: self._cell_double_clicked(index.row(), index.column()))
        self.table.kind_key.connect(self.switch_kind)
        # The user's choice of a row: a new row selected (mouse or keys), or a press on the
        # row already selected (which changes no selection in the table, but can turn the
        # selection of one segment of that line into the whole line).
        self.table.selectionModel().selectionChanged.connect(self._table_selection_changed)
        self.table.pressed.connect(self._table_selection_changed)
        top = QHBoxLayout()
        new_kind_label = QLabel("New line:")
        new_kind_label.setBuddy(self.new_kind)
        top.addWidget(new_kind_label)
        top.addWidget(self.new_kind)
        top.addStretch(1)
        top.addWidget(self.delete_button)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.table)
        model.subscribe(lambda _change: self.refresh())
        controller.selection_changed.connect(self._show_selection)
        self._show_selection()

    # -- following the model --------------------------------------------------------------------
    def set_metres_per_px(self, metres_per_px: float | None) -> None:
        """Show lengths in metres at ``metres_per_px`` (the imagery's ground resolution), or in
        pixels (None)."""
        table_model = self.table_model
        if metres_per_px == table_model.metres_per_px:
            return
        table_model.metres_per_px = metres_per_px
        count = table_model.rowCount()
        if count:
            column = self.COLUMNS.index("Length")
            table_model.dataChanged.emit(table_model.index(0, column),
                                         table_model.index(count - 1, column))
        self._fit_columns(list(range(count)), shrink=True)

    def refresh(self) -> None:
        """Bring the rows up to date with the model, touching only what changed."""
        with self._selecting_rows():
            written = self.table_model.follow()
        count = self.table_model.rowCount()
        if written or not count:
            self._fit_columns(written, shrink=len(written) == count)
        self._show_selection()

    def _fit_columns(self, rows: list[int], shrink: bool) -> None:
        """Widen the kind, length and score columns to fit ``rows``, or fit them exactly
        (narrowing too) when ``shrink``: ``rows`` are all the rows (or none is left). Only the
        few longest distinct texts of each column are measured."""
        header = self.table.horizontalHeader()
        grid = 1 if self.table.showGrid() else 0
        table_model = self.table_model
        texts = [(row, row_texts(table_model.line_at(row), table_model.metres_per_px))
                 for row in rows]
        for column in range(1, len(self.COLUMNS)):
            first_row: dict[str, int] = {}  # the first row showing each text of the column
            for row, row_text in texts:
                first_row.setdefault(row_text[column], row)
            longest = heapq.nlargest(self.FIT_SAMPLE, first_row,
                                     key=lambda text: (len(text), text))
            width = max([header.sectionSizeHint(column)]
                        + [self.table.sizeHintForIndex(table_model.index(first_row[text], column))
                           .width() + grid for text in longest])
            if not shrink:
                width = max(width, self.table.columnWidth(column))
            if width != self.table.columnWidth(column):
                self.table.setColumnWidth(column, width)

    @contextmanager
    def _selecting_rows(self):
        """Changes of the table's selection meanwhile are the panel's, following the model or
        the controller: not the user's choice of a row."""
        selecting, self._selecting = self._selecting, True
        try:
            yield
        finally:
            self._selecting = selecting

    # -- the user's actions ---------------------------------------------------------------------
    def _cell_double_clicked(self, row: int, column: int) -> None:
        if column == LinesTable.KIND_COLUMN:
            self.switch_kind(row)

    def switch_kind(self, row: int) -> None:
        """Switch the kind of the line of ``row`` (road ↔ river): it is traced again as such."""
        line = self.table_model.line_at(row)
        if line is not None:
            kinds = LINE_KINDS
            self.controller.set_line_kind(line.id,
                                          kinds[(kinds.index(line.kind) + 1) % len(kinds)])

    def _table_selection_changed(self, *_args) -> None:
        """The user chose a row (or none): select its whole line, even where one segment of
        that line was selected. (The table following the controller's selection, in
        :meth:`_show_selection` and :meth:`refresh`, does not get here, so a selected segment
        stays selected while the table shows its line's row.)"""
        if self._selecting:
            return
        rows = self.table.selectionModel().selectedRows()
        line = self.table_model.line_at(rows[0].row()) if rows else None
        self.controller.select(None if line is None else line.id)

    def _show_selection(self) -> None:
        """Select the selected line's row; the current cell stays in its column (selectRow
        alone would move it to the first: keys meant for the Kind cell would tick the name's
        box)."""
        row = self.table_model.row_of(self.controller.selection[0])
        self.delete_button.setEnabled(row is not None)
        column = max(self.table.currentIndex().column(), 0)
        with self._selecting_rows():
            self.table.clearSelection()
            if row is not None:
                self.table.selectRow(row)
                self.table.selectionModel().setCurrentIndex(
                    self.table_model.index(row, column),
                    QItemSelectionModel.SelectionFlag.NoUpdate)

    def delete_selected(self) -> None:
        """Delete the selected line; the status bar says so."""
        line = self.model.line(self.controller.selection[0])
        if line is not None:
            self.model.delete(line.id)
            self.controller.tell(f"deleted {line.name} (Ctrl+Z undoes)")


def _runs(rows: list[int]) -> list[tuple[int, int]]:
    """Increasing ``rows`` as runs of consecutive rows: [(first row, count), …]."""
    runs: list[tuple[int, int]] = []
    for row in rows:
        if runs and runs[-1][0] + runs[-1][1] == row:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((row, 1))
    return runs
