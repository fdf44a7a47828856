import sys

from benchmarks.cli import main
from benchmarks.processes import stop_like_ctrl_c

stop_like_ctrl_c()  # a `kill` or a closed terminal stops a run as Ctrl-C does: levels kept, children stopped
sys.exit(main())
