import sys

from hwperfd.daemon import main

sys.exit(main())
