"""What a decorated kernel is: its identity (`identity`), source (`source`), call binding (`call`), which fields are
compile options (`compile_options`) and how `occupancy` lowers to them (`occupancy`), the checks of its
`@autotune` arguments (`option_checks`), and `prune=` (`pruning`). What the engine needs of it is
`engine.tunable_kernel.TunableKernel`."""
