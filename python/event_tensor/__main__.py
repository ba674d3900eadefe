"""`python -m event_tensor` is the `event-tensor` command line."""

import sys

from .cli import main

sys.exit(main())
