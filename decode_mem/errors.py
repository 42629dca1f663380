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


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived (``signum``): raised where the program was, as Ctrl-C's KeyboardInterrupt is."""

    def __init__(self, signum: int = 2) -> None:
        super().__init__(signum)
        self.signum = signum


class Stopped(Exception):  # a run stopped on request: not an error of the user's
    """A run stopped on request (Ctrl-C, SIGTERM, a Cancel button) after keeping what reached disk.

    ``str()`` is the one line for the user ("stopped at frame N of M; --resume continues"); ``signum`` the signal
    that asked (None: a cooperative stop such as a Cancel button); ``stem``, ``frame``, ``frames``: where it stopped.
    """

    def __init__(self, message: str, *, signum: int | None = None, stem: str | None = None,
                 frame: int | None = None, frames: int | None = None) -> None:
        super().__init__(message)
        self.signum, self.stem, self.frame, self.frames = signum, stem, frame, frames

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal ended (130 for Ctrl-C)."""
        return 128 + (self.signum or 2)


def exception_line(e: BaseException, *, with_type: bool = True, limit: int | None = None) -> str:
    """An exception as one line: its type and its message's first line (``with_type`` False: the line alone; where
    the message says nothing, the type's name), cut to ``limit`` characters. A library's messages (pyarrow, h5py,
    zarr) can run over several lines: quoted rows, stack frames."""
    lines = str(e).strip().splitlines()
    if not lines:
        return type(e).__name__
    line = lines[0][:limit] if limit else lines[0]
    return f"{type(e).__name__}: {line}" if with_type else line


def failure_reason(e: BaseException) -> str:
    """Why an input failed, for a run's list of failures: decode_mem's own message as it is, another error with its
    type's name first."""
    return str(e) if type(e).__module__.startswith("decode_mem") else exception_line(e)
