"""`python -m autotune.engine.isolation FD PARENT_PID`: the worker process (see worker.py)."""

from .worker import main

main()
