"""The PySide6 desktop application (``python main.py``): click-to-trace on a Qt canvas.

Where a click becomes a polyline: ``canvas`` (mouse) → ``tracing.TracingController.press`` →
``drawing.LineDrawing`` (the state machine of the line being drawn) → a job on the window's
``jobs.JobQueue`` (its worker thread) running ``traces.run_requests`` → a segment in
``model.LinesModel``, whose change notice redraws that line's canvas item. The canvas reads
sharp tiles of huge rasters (``display.read_tile``) on a second queue and thread of its own.

Qt-free: ``model``, ``drawing``, ``edits`` (re-traces as commands), ``imports``, ``traces``,
``params`` (the accepted parameter ranges), ``session`` and ``files`` (autosave, export). The
Qt layer (``jobs``, ``previews``, ``tracing``, ``canvas``, ``display``, ``panels``,
``main_window``) observes the model and calls into ``core`` (and ``gpu`` only through
``gpu.select.choose_backend``).
"""
