import sys

from hwperfd.perfex import hold_start_signals

hold_start_signals()  # before the imports, which take most of perfex's start-up

from hwperfd.perfex.cli import main  # noqa: E402

sys.exit(main())
