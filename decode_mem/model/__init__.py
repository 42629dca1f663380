"""The DECODE-style network and its loss."""
