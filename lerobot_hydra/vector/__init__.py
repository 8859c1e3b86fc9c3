"""Vector envs whose simulators live in worker processes that outlive a task, exchanging steps through shared memory."""
