import sys

from sglang_layout.cli import main

sys.exit(main())
