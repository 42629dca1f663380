"""decode_mem: DECODE-style single-molecule localization with memory bounded by design."""

__version__ = "0.1.0"
