"""aotgrad's counters: one mapping, shared by every module that counts.

`counters` is `aotgrad.counters`, with the manners of `torch._dynamo.utils.counters`: a
`defaultdict` of `collections.Counter`s, so a missing group or name reads 0, and `.clear()`
on the mapping or on one group forgets the counts but not the counting. Modules count through
the mapping on every increment, never through a group they looked up once (a cleared mapping
would leave that group orphaned):

    counters["compiled_autograd"]["hits"] += 1

Groups: "compiled_autograd" (compiled_autograd/cache.py), "ddp" (distributed/ddp.py),
"disk_cache" (disk_cache.py; inductor_keys.py's `inductor_keys_known` and `inductor_keys_stored`).
"""
from __future__ import annotations

from collections import Counter, defaultdict

counters: defaultdict[str, Counter] = defaultdict(Counter)
