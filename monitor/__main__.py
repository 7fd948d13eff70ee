"""``python -m monitor`` is the ``searchmon`` command."""

import sys

from monitor.cli import main

sys.exit(main())
