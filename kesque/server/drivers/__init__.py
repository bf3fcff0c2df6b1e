"""Drivers: the asyncio side of the domain cores.

Each module here binds a sans-IO core of a domain package to the event loop, the inter-node
channel and the files: the replica fetchers and the ISR changes sent to the controller run
``replication``'s rules, the share-partition manager and persister run ``share``'s state
machines, the log cleaner runs ``storage``'s cleaner on its threads, the quorum controller
runs ``controller``'s decisions through raft, the purgatories wait on ``replication``'s delayed
operations, and the transaction markers, the producer-id block requests and the coordinators'
timers (the loop as their scheduler) run ``coordinator``'s decisions. The server builds them in one place
(``server/server.py``); nothing below ``server/`` imports them (.importlinter).
"""
