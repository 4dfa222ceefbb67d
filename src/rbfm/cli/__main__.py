import sys

from rbfm.cli import main

sys.exit(main())
