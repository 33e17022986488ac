"""Inside compiled models: `torch_op` (an autotuned launch as a torch custom op, for torch.compile with
fullgraph=True), the CUDA-graph capture rule (`capture`: never tune inside a capture), the fake-tensor tracing
flag that skips launches (`tracing`), and `warmup` (tune the keys a model will see before serving)."""
