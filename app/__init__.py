"""The PySide6 desktop application (``python main.py``): click-to-trace on a Qt canvas.

``model`` and ``session`` are Qt-free; the Qt layer (``jobs``, ``tracing``, ``canvas``,
``panels``, ``main_window``) observes the model and calls into ``core`` (and ``gpu`` only
through ``gpu.select.choose_backend``).
"""
