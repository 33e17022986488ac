"""What a decorated kernel is: its identity (`identity`), source (`source`), call binding (`call`), the checks of
its `@autotune` arguments (`option_checks`), `prune=` (`pruning`), and the protocol the engine tunes it through
(`protocol`)."""
