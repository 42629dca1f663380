"""One error family for everything a user can get wrong: input files, configs, checkpoints."""


class DecodeMemError(Exception):
    """Base class of every error decode_mem raises on purpose."""


class StackError(DecodeMemError, ValueError):
    """An input stack cannot be opened or read: the message names the file and the problem."""


class EmptyStackError(StackError):
    """The stack holds no pixels (an axis of length 0): an error for a file, "no frames yet" for a growing one."""


class ConfigError(DecodeMemError, ValueError):
    """A configuration or parameter value is invalid: the message names the key and the constraint."""


class CheckpointError(DecodeMemError, ValueError):
    """A model checkpoint is missing, corrupt or does not match the code."""
