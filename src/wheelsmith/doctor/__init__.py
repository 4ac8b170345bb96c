"""Is an installed environment on the fast path: examine, judge, fix. Never builds."""
