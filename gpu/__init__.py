"""CUDA backend: kernels in ``*.cu`` beside their pycuda host code. No Qt here."""
