"""Where wheels go: the immutable index (an append-only ledger, content-addressed files,
derived pages), publishing into it, serving it, and what a channel offers an environment.
Never imports build/."""
