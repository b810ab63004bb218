"""`python -m stacks ...`: the environment layer's command line (stacks/cli/)."""

import os
import sys

from stacks.cli import main

code = main()
sys.stdout.flush()
sys.stderr.flush()
# The Pulumi runtime leaves an asyncio loop whose finaliser sometimes prints "Exception ignored
# ... Invalid file descriptor" at interpreter exit; everything is written, so skip finalisers.
os._exit(code)
