"""Many wheels: the nightly matrix, its runs and reports, and newer upstream releases."""
