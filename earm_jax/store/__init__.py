"""Host-side persistence: content keys, the embedding model and its on-disk
cache, atomic pytree checkpoints, the retriever's SQLite journal and its
single-writer folder lock. Imported by scoring, the retriever and LoCoMo;
never by the pure core.
"""
