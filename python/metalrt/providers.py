"""The op registry's providers: which implementations exist and which one ran.

A provider runs one op on one device, or declines; providers are tried in a fixed
order (the tier, then name: prefill-bf16, prefill, fast, oracle on the CPU; docs/cpu.md). On a unified-memory device an op with no willing native
provider falls back to the CPU provider, reported as "reference:<name>".
"""
from ._metalrt.providers import list, ops, registered, reset_stats, set_enabled, stats, version  # noqa: A004

__all__ = ["list", "ops", "registered", "reset_stats", "set_enabled", "stats", "version"]
