"""The keeper: a detached kbench process that holds one standby judge between `kbench eval` commands."""
