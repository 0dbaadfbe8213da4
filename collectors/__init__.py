"""Collectors: capture events in the profiled process and write them to the store.

They know CUPTI, NCCL, NVTX, NVML and torch hooks; they never analyse.
"""
