import sys

from pyelmo.cli import main

sys.exit(main())
