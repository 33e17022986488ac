"""Tuning modes beyond blocking tuning at the first call: across real calls (`online`) and agreed across
torch.distributed ranks (`distributed`)."""
