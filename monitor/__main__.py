"""``python -m monitor`` is the ``searchmon`` command."""

import sys

from monitor.cli.main import main

sys.exit(main())
