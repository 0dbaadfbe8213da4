"""Host-side collectors: hooks that time the training loop on the CPU (DataLoader waits,
optimizer steps, torch.distributed calls, CUDA synchronisation), the NVML sampler that fills
the ``metrics`` table while a run records, and the environment snapshot with its checks
(``perfscope doctor``)."""
