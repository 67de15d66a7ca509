"""Persistence: what a compile leaves on disk for the next process.

In: graphs, code and keys from the stages; out: the same, read back in another process, or
nothing (a miss is never an error). disk_cache.py keeps the traced and partitioned graphs
(a second process skips trace and partition), graph_pickle.py writes and reads those graphs,
generated.py keeps the code objects of aotgrad's generated Python, inductor_keys.py the keys
Inductor stored `aotgrad_inductor`'s graphs under, and cache_folder.py owns the folder they
share (`config.cache_dir`): who may write it, files written whole, eviction, `aotgrad cache`.
The stages import these modules; these import no stage.
"""
