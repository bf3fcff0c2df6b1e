"""Mirror topics (issue 28, docs/mirror.md): the sans-IO rules of cluster links and of a mirror
partition's copying; the driver that fetches from the source is ``server/drivers/mirror_fetcher.py``."""
