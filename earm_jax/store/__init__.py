"""Host-side persistence: content keys, the embedding model and its on-disk
cache, atomic pytree checkpoints. Imported by scoring, the retriever and LoCoMo;
never by the pure core.
"""
