"""`python -m autotune.engine.isolation FD PARENT_PID MAIN_THREAD`: the worker process (see worker.py)."""

from .worker import main

main()
