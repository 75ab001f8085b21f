"""The exploration bucket: which subjects the service answers with a uniformly random level, and which level.

A subject explores when a keyed hash of its id falls below the campaign's share: BLAKE2b keyed by the seed, so
the bucket is a function of (seed, population, id) alone. Every worker, every restart and every retry puts a
subject in the same bucket, and nobody without the seed can tell which ids explore. An explored request draws
its level from a second keyed hash, of its request_id: the draw is fixed per request, so a retry proposes what
the first attempt proposed (the ledger answers a replay with the stored row anyway).

Python's ``hash()`` would not do: it is salted per process, so two workers would disagree.
"""

from __future__ import annotations

import hashlib
import math

EXPLORE, EXPLOIT = "explore", "exploit"
_BUCKET, _DRAW = b"promokit-bucket", b"promokit-draw"
_SPAN = 2**64


class Exploration:
    """The bucket of a subject and the draw of a request, for a share in [0, 1) and a seed in [0, 2⁶⁴)."""

    def __init__(self, share: float, seed: int):
        self.share = share
        self.threshold = math.floor(share * _SPAN)  # share 0 explores nobody: no hash is below 0
        key = seed.to_bytes(8, "big")
        # keyed once: a copy of the keyed state hashes an id in ≈ 0.5 µs, a new keyed hash in ≈ 0.8 µs
        self._keyed = {purpose: hashlib.blake2b(digest_size=8, key=key, person=purpose) for purpose in (_BUCKET, _DRAW)}

    def bucket(self, population: str, subject_id: str) -> str:
        if not self.threshold:
            return EXPLOIT
        return EXPLORE if self._hash(_BUCKET, f"{population}:{subject_id}") < self.threshold else EXPLOIT

    def draw(self, request_id: str, n: int) -> int:
        """One of ``0 … n-1``, uniform over request ids (the modulo's bias is below n / 2⁶⁴)."""
        return self._hash(_DRAW, request_id) % n

    def _hash(self, purpose: bytes, text: str) -> int:
        keyed = self._keyed[purpose].copy()
        keyed.update(text.encode("utf-8"))
        return int.from_bytes(keyed.digest(), "big")
