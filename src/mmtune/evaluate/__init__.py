"""Task metrics and generation-based evaluation."""
