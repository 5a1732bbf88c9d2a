"""The one Redis path of every store: a URL parser, an asyncio client, a watch on servers."""
