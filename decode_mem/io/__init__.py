"""Input and output: lazy stacks, the camera model, emitter tables and their file formats."""

from decode_mem.io.prefetch import prefetch
from decode_mem.io.stack import Stack, open_stack

__all__ = ["Stack", "open_stack", "prefetch"]
