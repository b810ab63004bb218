"""`python -m stacks ...`: the environment layer's command line (stacks/cli/)."""

import os
import sys

from stacks.cli import main

try:
    code = main()
    sys.stdout.flush()
except BrokenPipeError:
    # `plan ... | head` closed the pipe: the reader has what it wanted. Python's signal docs (note on
    # SIGPIPE) recommend pointing stdout at devnull so the interpreter's own flush at exit cannot
    # raise again, and exiting non-zero, as a command killed by SIGPIPE would.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = 1
except KeyboardInterrupt:
    # Ctrl-C: one line, and the status a shell gives a command SIGINT ended (128 + 2), never a traceback.
    sys.stderr.write("\ninterrupted\n")
    code = 130
sys.exit(code)
