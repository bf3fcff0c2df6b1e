"""Share groups (KIP-932): the leader's share partitions, share sessions and their wiring."""
