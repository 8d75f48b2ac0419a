"""The training loop and what it needs: the step, checkpoints, schedules, logging."""
