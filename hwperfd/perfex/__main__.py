import sys

from hwperfd.perfex.cli import main

sys.exit(main())
