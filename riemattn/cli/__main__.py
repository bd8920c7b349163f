"""``python -m riemattn.cli``: the same as the ``riemattn`` command."""

import sys

from . import main

sys.exit(main())
