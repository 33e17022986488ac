"""The engine: tune one key. The tuner (`tuner`) asks a strategy (`search/`) for configs, compiles them in a pool
(`pipeline`, `compilers`), has a trial runner measure them (`runners`: in-process; `isolation/`: in worker
processes) with the timers of `timing`, and returns the winner and the trials. It never touches the cache."""
