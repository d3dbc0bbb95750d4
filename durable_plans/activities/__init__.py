"""Every side effect the workflows need, each a retryable Temporal activity."""
