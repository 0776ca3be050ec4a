import sys

from geist.cli import main

sys.exit(main())
