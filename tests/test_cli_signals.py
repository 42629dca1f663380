"""A signal that lands while Python runs a weakref callback or a ``__del__`` (where an exception is printed as
"Exception ignored" and dropped) still stops the command: ``cli.run`` delivers it again once the callback is over."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

# a command whose body triggers a weakref callback; SIGTERM arrives and is handled inside it, then the body goes on
# working for up to 20 s unless the interrupt reaches it
PROBE = textwrap.dedent("""
    import os, signal, sys, time, weakref
    from decode_mem.cli import new_parser, run

    class Thing:
        pass

    def body(args):
        def callback(_ref):
            os.kill(os.getpid(), signal.SIGTERM)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 0.3:  # bytecodes run here: the handler raises inside the callback
                pass
        thing = Thing()
        ref = weakref.ref(thing, callback)
        del thing  # the callback runs now
        print("callback over", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            time.sleep(0.01)
        print("body finished", file=sys.stderr, flush=True)

    sys.exit(run(new_parser("probe", "a probe"), body, []))
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_handled_inside_a_weakref_callback_still_stops_the_command(signum: int) -> None:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", PROBE.replace("SIGTERM", signal.Signals(signum).name)],
                          capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert "callback over" in proc.stderr, proc.stderr  # the first delivery was dropped in the callback
    assert "body finished" not in proc.stderr, proc.stderr
    assert proc.returncode == 128 + signum, proc.stderr
    assert took < 15, (took, proc.stderr)
