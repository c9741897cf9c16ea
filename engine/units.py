"""Loss units: nats per token, and bits per corpus byte, the unit that compares models of
different tokenizers (a BPE token covers several bytes, so its nats/token sit higher)."""

from __future__ import annotations

import math


def bits_per_byte(nats_per_token: float, tokens_per_byte: float) -> float:
    """bits/byte = nats/token x tokens/byte / ln 2 (the byte tokenizer: 1 token per byte)."""
    return nats_per_token * tokens_per_byte / math.log(2)
