"""The engine: tune one key. The tuner (`tuner`) asks a strategy (`search/`) for configs, compiles them in a pool
(`pipeline`, `compilers`), has a trial runner (`trial_runner`: in this process, `in_process`; in worker processes,
`isolation/`; on several calls, `multi_call`; chosen by `runners`) measure them with the timers of `timing`, and
returns the winner and the trials. It never touches the cache."""
