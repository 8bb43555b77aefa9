"""The project's error tree: every user mistake raises a :class:`TraceError` subclass.

The CLI turns these into one line on stderr and exit code 2; the GUI into a message.
"""


class TraceError(Exception):
    """Root of every error the tracer reports to a user."""


class ImageReadError(TraceError, OSError):
    """An image file is missing, unreadable or of an unsupported layout."""


class PointOutsideImage(TraceError, ValueError):
    """An endpoint lies outside the image."""


class BadParameter(TraceError, ValueError):
    """A tracing parameter is out of its valid range."""


class NoAdmissiblePath(TraceError):
    """No polyline satisfies the turning-angle limit on this corridor."""


class BackendUnavailable(TraceError, RuntimeError):
    """A requested compute backend (e.g. the GPU) cannot be used here."""


class OutputWriteError(TraceError, OSError):
    """A result file could not be written."""


class ModelUnavailable(TraceError, RuntimeError):
    """The learned surface model (or ONNX Runtime, which runs it) cannot be loaded."""
