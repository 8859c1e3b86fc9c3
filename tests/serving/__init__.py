"""The policy server, policy=remote, a sweep's server job, and server autotune."""
