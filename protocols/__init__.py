"""Everything that crosses the network, as pure data: wire records (records) and their codec (codec).

Imports neither torch nor hivemind nor asyncio. docs/PROTOCOL.md is the normative text.
"""
