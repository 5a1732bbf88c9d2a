"""The one Redis path of every store: a URL parser, an asyncio client, a watch on servers."""

__all__ = ["StoreFailure"]


class StoreFailure(Exception):
    """A Redis command did not get an answer it could use (refused, reset, timed out, an error
    reply, a server the store's watch refused). The stores turn it into their own error."""
