"""The package's version, in the lowest layer: the front door exports it and the worker's
default build id (``worker_versioning``) is derived from it, which must not import the door."""

__version__ = "0.2.0"
