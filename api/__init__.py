"""The convtune HTTP service: a thin FastAPI layer over the tuner's Python API."""
