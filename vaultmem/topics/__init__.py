"""Topic trees: one summary tree per hot entity, beside the source trees.

``heat`` says how hot an entity is; ``plan`` pictures one topic and plans its next step; ``route`` drives the
steps under the write lock (archive, revive, which topics to route); ``query`` reads the entity index (a name
to its key, hot topics, a topic's view, the co-occurrence graph).
"""

from vaultmem.topics import heat, plan, query, route

__all__ = ["heat", "plan", "query", "route"]
